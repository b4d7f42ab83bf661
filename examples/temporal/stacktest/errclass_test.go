package stacktest

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/finale-dev/finale/errclass"
)

// TestServiceErrors classifies the Temporal SDK's own error values with
// errclass's built-in rules alone, no extension: the SDK keeps the gRPC
// status behind Status(), not GRPCStatus(), and turns its own 10 s call
// timeout into *serviceerror.DeadlineExceeded (serviceerror.FromStatus is
// how the SDK converts every failed call).
func TestServiceErrors(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	from := func(c codes.Code) error { return serviceerror.FromStatus(status.New(c, "x")) }
	cases := map[string]struct {
		ctx  context.Context
		err  error
		want errclass.Class
	}{
		"SDK call timeout, caller live":         {live, from(codes.DeadlineExceeded), errclass.Transport},
		"SDK call timeout, caller gone":         {done, from(codes.DeadlineExceeded), errclass.Canceled},
		"NewDeadlineExceeded":                   {live, serviceerror.NewDeadlineExceeded("context deadline exceeded"), errclass.Transport},
		"Unavailable":                           {live, from(codes.Unavailable), errclass.Transport},
		"Unauthenticated":                       {live, from(codes.Unauthenticated), errclass.Auth},
		"PermissionDenied":                      {live, serviceerror.NewPermissionDenied("no", ""), errclass.Auth},
		"NotFound":                              {live, serviceerror.NewNotFound("no Worker Deployment found"), errclass.NotFound},
		"NamespaceNotFound":                     {live, serviceerror.NewNamespaceNotFound("ns"), errclass.NotFound},
		"AlreadyExists":                         {live, serviceerror.NewAlreadyExists("x"), errclass.Conflict},
		"FailedPrecondition":                    {live, serviceerror.NewFailedPrecondition("x"), errclass.Conflict},
		"ResourceExhausted":                     {live, from(codes.ResourceExhausted), errclass.Throttled},
		"InvalidArgument":                       {live, serviceerror.NewInvalidArgument("x"), errclass.Invalid},
		"Canceled":                              {live, serviceerror.NewCanceled("x"), errclass.Canceled},
		"Internal":                              {live, serviceerror.NewInternal("x"), errclass.Unknown},
		"wrapped SDK call timeout, caller live": {live, fmt.Errorf("delete versions: %w", from(codes.DeadlineExceeded)), errclass.Transport},
	}
	got, want := map[string]errclass.Class{}, map[string]errclass.Class{}
	for name, tc := range cases {
		got[name], want[name] = errclass.Of(tc.ctx, tc.err), tc.want
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
}

package controller

import (
	"testing"

	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestOwnershipOf(t *testing.T) {
	const tag = "finale:workerdeployment:uid-1"
	cases := map[string]struct {
		manager, lastModifier string
		want                  ownership
	}{
		"claimed by the tag":                    {manager: tag, lastModifier: "someone", want: ours},
		"created by the tag, claim lost":        {manager: "", lastModifier: tag, want: claimLost},
		"no manager, created by workers":        {manager: "", lastModifier: "", want: foreign},
		"no manager, last changed by someone":   {manager: "", lastModifier: "ops@example.com", want: foreign},
		"managed by another identity":           {manager: "other-controller", lastModifier: tag, want: foreign},
		"managed by another object of the kind": {manager: "finale:workerdeployment:uid-2", lastModifier: "", want: foreign},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ownershipOf(sdkclient.WorkerDeploymentInfo{ManagerIdentity: tc.manager, LastModifierIdentity: tc.lastModifier}, tag)
			if got != tc.want {
				t.Errorf("ownershipOf = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestIsAccessDenied is the naive build's whole eviction rule, as upstream's
// isAccessDeniedErr: PermissionDenied or Unauthenticated, nothing else.
func TestIsAccessDenied(t *testing.T) {
	for err, want := range map[error]bool{
		serviceerror.NewPermissionDenied("no", ""):            true,
		status.Error(codes.Unauthenticated, "bad key"):        true,
		serviceerror.NewDeadlineExceeded("deadline exceeded"): false,
		serviceerror.NewUnavailable("refused"):                false,
		ErrAPIKeyUnavailable:                                  false,
	} {
		if got := isAccessDenied(err); got != want {
			t.Errorf("isAccessDenied(%v) = %v, want %v", err, got, want)
		}
	}
}

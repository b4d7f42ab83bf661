package errclass_test

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/finale-dev/finale/errclass"
)

// errQuota is a domain error from some SDK that the built-in rules do not
// know.
var errQuota = errors.New("quota exhausted")

func Example() {
	ctx := context.Background()

	// A gRPC call whose own deadline fired while the caller is still live:
	// the client is broken.
	fmt.Println(errclass.Of(ctx, status.Error(codes.DeadlineExceeded, "describe")))

	// The same deadline while the caller is shutting down: never evict.
	done, cancel := context.WithCancel(ctx)
	cancel()
	fmt.Println(errclass.Of(done, fmt.Errorf("describe: %w", context.DeadlineExceeded)))

	// A per-call bound that carries ErrCallTimeout as its cause and fired
	// first: the client did not answer in time, even if the caller is done
	// by now.
	call, cancelCall := context.WithTimeoutCause(ctx, 0, errclass.ErrCallTimeout)
	defer cancelCall()
	<-call.Done()
	fmt.Println(errclass.Of(call, fmt.Errorf("describe: %w", context.DeadlineExceeded)))

	// User rules run first.
	c := errclass.New(func(_ context.Context, err error) (errclass.Class, bool) {
		if errors.Is(err, errQuota) {
			return errclass.Throttled, true
		}
		return "", false
	})
	fmt.Println(c.Classify(ctx, fmt.Errorf("create tenant: %w", errQuota)))
	// Output:
	// Transport
	// Canceled
	// Transport
	// Throttled
}

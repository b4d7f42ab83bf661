package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/finale-dev/finale/examples/postgres/cmd/operator/app"
)

// Election timings that the elector would reject fail before the operator
// starts, naming the flags.
func ExampleMain() {
	err := app.Main(context.Background(), []string{"--leader-elect", "--records-namespace=operators", "--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=5s"}, io.Discard)
	fmt.Println(errors.Is(err, app.ErrFlags))
	fmt.Println(err)
	// Output:
	// true
	// operator: bad flags: --leader-elect-lease-duration 5s must be longer than --leader-elect-renew-deadline 5s
}

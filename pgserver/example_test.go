package pgserver_test

import (
	"context"
	"fmt"

	"github.com/finale-dev/finale/pgserver"
)

// Start a throwaway server and read what it answered. Connecting with a
// driver (pgx) is in examples/postgres/stacktest/pgserver.
func Example() {
	ctx := context.Background()
	s, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Stop()
	fmt.Println(s.Version != "", s.Host)
	// Output: true 127.0.0.1
}

package pgserver_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/finale-dev/finale/pgserver"
)

// Start a throwaway server and read its deployment identity.
func Example() {
	ctx := context.Background()
	s, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Stop()

	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	var id int64
	if err := conn.QueryRow(ctx, "SELECT system_identifier FROM pg_control_system()").Scan(&id); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(id != 0)
	// Output: true
}

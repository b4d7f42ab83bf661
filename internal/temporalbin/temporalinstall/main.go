// Command temporalinstall builds the Temporal server into finale's cache, or
// does nothing when it is current. `make temporal` runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/finale-dev/finale/internal/temporalbin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := temporalbin.Ensure(ctx, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Printf("temporalbin: Temporal server %s in %s\n", temporalbin.ServerVersion, temporalbin.Path(dir))
	return nil
}

// Command argoinstall builds the stock Argo workflow-controller into
// finale's cache, or does nothing when it is current. `make argo` runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/finale-dev/finale/internal/argobin"
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
	dir, err := argobin.Ensure(ctx, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Printf("argobin: Argo Workflows %s workflow-controller in %s\n", argobin.Version, dir)
	return nil
}

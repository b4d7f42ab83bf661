// Command kubeinstall builds the Kubernetes binaries into finale's cache, or
// does nothing when they are current. `make kube` runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/finale-dev/finale/internal/kubebin"
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
	dir, err := kubebin.Ensure(ctx, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Printf("kubebin: Kubernetes %s binaries in %s\n", kubebin.KubernetesVersion, dir)
	return nil
}

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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := kubebin.Ensure(ctx, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("kubebin: Kubernetes %s binaries in %s\n", kubebin.KubernetesVersion, dir)
}

// Command kubeinstall builds the Kubernetes binaries finale's control plane
// runs into their cache, or does nothing when the binaries there carry this
// version's stamp. It needs only the Go toolchain and the module proxy:
//
//	go run github.com/finale-dev/finale/controlplane/kubeinstall@<version>
//
// builds them once (minutes) before the first test does; `make kube` runs
// it in a checkout. -dir, or $FINALE_KUBE_BIN_DIR, moves the cache.
//
// It calls internal/kubebin, the build itself, rather than
// controlplane.Binaries, which does the same: controlplane imports
// client-go and controller-runtime, and compiling those (about 700
// packages, 5 CPU-minutes cold) only to start the build held up every
// cold first run, make test's included, by minutes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/finale-dev/finale/internal/kubebin"
)

func main() {
	dir := flag.String("dir", "", "cache directory (default $"+kubebin.EnvDir+", else the user cache directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	got, err := kubebin.Ensure(ctx, *dir, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("kubeinstall: the Kubernetes binaries are in %s\n", got)
}

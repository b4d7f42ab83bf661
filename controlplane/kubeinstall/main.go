// Command kubeinstall builds the Kubernetes binaries finale's control plane
// runs into their cache, or does nothing when the binaries there carry this
// version's stamp. It needs only the Go toolchain and the module proxy:
//
//	go run github.com/finale-dev/finale/controlplane/kubeinstall@<version>
//
// puts them in place once before the first test does: from a kubebuilder
// envtest asset directory of the same version, the official release
// binaries (SHA-256 verified; $FINALE_KUBE_RELEASE_URL names a mirror, "off"
// turns downloads off), else a build from Go modules (minutes). The output
// says where each binary came from. `make kube` runs it in a checkout.
// -dir, or $FINALE_KUBE_BIN_DIR, moves the cache; -version v1.33 installs
// the oldest Kubernetes server finale supports instead (make kube133).
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
	version := flag.String("version", "", "Kubernetes release: "+kubebin.Current.Kubernetes+" (the default) or "+kubebin.Oldest.Kubernetes)
	flag.Parse()
	rel, err := kubebin.Lookup(*version)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	got, err := rel.Ensure(ctx, *dir, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("kubeinstall: the Kubernetes %s binaries are in %s\n", rel.Kubernetes, got)
}

// Command publish writes this module's zip into a file-based GOPROXY
// directory and prints, as shell assignments, what the go command needs to
// fetch it from there:
//
//	eval "$(go run ./internal/modproxy/publish -dir /tmp/proxy)"
//	go run "$FINALE_MODULE/controlplane/kubeinstall@$FINALE_VERSION"
//
// `make kube-cold` uses it.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/finale-dev/finale/internal/modproxy"
)

func main() {
	dir := flag.String("dir", "", "GOPROXY directory to write into (required)")
	root := flag.String("root", ".", "root of the module to publish")
	flag.Parse()
	if err := run(*dir, *root); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(dir, root string) error {
	if dir == "" {
		return fmt.Errorf("publish: -dir is required")
	}
	mv, err := modproxy.Publish(dir, root)
	if err != nil {
		return err
	}
	env, err := modproxy.Env(dir, mv)
	if err != nil {
		return err
	}
	env = append(env, "FINALE_MODULE="+mv.Path, "FINALE_VERSION="+mv.Version)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Printf("export %s='%s'\n", k, strings.ReplaceAll(v, "'", `'\''`))
	}
	return nil
}

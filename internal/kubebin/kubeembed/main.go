// Command kubeembed writes internal/kubebin/module.txtar from tools/kube,
// the build module it copies. `make kube-embed` runs it from the module
// root; kubebin's tests fail while the two differ.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/finale-dev/finale/internal/kubebin"
)

func main() {
	src := flag.String("src", "tools/kube", "the build module")
	out := flag.String("out", filepath.Join("internal", "kubebin", kubebin.ArchiveName), "the archive to write")
	flag.Parse()
	b, err := kubebin.Pack(os.DirFS(*src))
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeembed:", err)
		os.Exit(1)
	}
	fmt.Printf("kubeembed: %s written from %s\n", *out, *src)
}

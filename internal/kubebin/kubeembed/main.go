// Command kubeembed writes the archives internal/kubebin embeds from the
// build modules they copy: internal/kubebin/module.txtar from tools/kube and
// module133.txtar from tools/kube133. `make kube-embed` runs it from the
// module root; kubebin's tests fail while an archive and its module differ.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/finale-dev/finale/internal/kubebin"
)

func main() {
	root := flag.String("root", ".", "the finale checkout")
	flag.Parse()
	for _, r := range kubebin.Releases() {
		src := filepath.Join(*root, filepath.FromSlash(r.Tools))
		out := filepath.Join(*root, "internal", "kubebin", r.Archive)
		b, err := r.Pack(os.DirFS(src))
		if err == nil {
			err = os.WriteFile(out, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubeembed:", err)
			os.Exit(1)
		}
		fmt.Printf("kubeembed: %s written from %s\n", out, src)
	}
}

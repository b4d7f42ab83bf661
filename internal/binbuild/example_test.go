package binbuild_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/finale-dev/finale/internal/binbuild"
)

// A server binary built once from a build module in a checkout, then found
// current by its stamp.
func ExampleSpec_Ensure() {
	src, err := os.MkdirTemp("", "module")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(src)
	_ = os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.com/server\n\ngo 1.26\n"), 0o644)
	_ = os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)

	s := binbuild.Spec{
		Prefix: "serverbin", What: "the example server", Dir: filepath.Join(src, "cache"),
		Source: os.DirFS(src), Targets: []binbuild.Target{{Name: "server", Package: "."}},
		Cold: "a second",
	}
	dir, err := s.Ensure(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	want, _ := s.Stamp()
	fmt.Println(s.Current(want), filepath.Base(binbuild.Path(dir, "server")))
	// Output: true server
}

// Command guard-image builds the Argo guard's container image from this
// repository, without a container engine: internal/images' build of the
// guard (a static linux binary as /guard in a one-layer OCI image named,
// tagged and run as the user config/manager/manager.yaml says), run from
// this module. make guard-image and make images build the same image with
// internal/images/imagebuild from the repository's root. It writes an OCI
// image layout into -o and the same as an OCI archive into -o.tar, and
// pushes nothing:
//
//	go run ./cmd/guard-image -o ../../bin/guard-image
//	skopeo copy oci:../../bin/guard-image:v0.1.0 docker://REGISTRY/finale-argo-guard:v0.1.0
//	ctr -n k8s.io images import ../../bin/guard-image.tar
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/internal/images"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "guard-image:", err)
		os.Exit(exitcode.Of(err))
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("guard-image", flag.ContinueOnError)
	fs.SetOutput(out)
	dir := fs.String("o", "", "output: the OCI image layout directory (replaced if it holds one); the OCI archive goes to the same path with .tar")
	module := fs.String("module", ".", "the examples/argo module directory")
	version := fs.String("version", "", "the release the image is tagged with; the manifest must pull that tag (empty: the manifest's tag)")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH of the image")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if *dir == "" || fs.NArg() > 0 {
		return exitcode.Usagef("usage: guard-image -o DIR [-module DIR] [-version TAG] [-arch GOARCH]")
	}
	img, ok := images.ByName("guard")
	if !ok {
		return errors.New("internal/images lists no guard image")
	}
	b, err := images.Build(filepath.Join(*module, "..", ".."), img, *version, *dir, *arch)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "built %s (linux/%s, %s, binary %.1f MiB): OCI layout %s, archive %s; nothing pushed\n",
		b.Ref, *arch, b.Descriptor.Digest, float64(b.BinaryBytes)/(1<<20), b.Layout, b.Archive)
	return err
}

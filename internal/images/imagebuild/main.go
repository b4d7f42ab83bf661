// Command imagebuild builds the container images finale's manifests pull
// (package images), without a container engine, into OCI image layouts and
// archives; make images and make NAME-image run it from the repository's
// root:
//
//	go run ./internal/images/imagebuild -image operator -version v0.1.0 -o bin/operator-image
//
// Exit status (internal/exitcode): 0 built, 1 the build failed, 64 a usage
// error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/internal/images"
)

const usage = "usage: imagebuild -image NAME -o DIR [-version TAG] [-arch GOARCH] [-root DIR]\n\nflags:\n"

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(exitcode.Of(err))
	}
}

func names() string {
	var n []string
	for _, img := range images.All {
		n = append(n, img.Name)
	}
	return strings.Join(n, ", ")
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	name := fs.String("image", "", "the image to build: "+names())
	dir := fs.String("o", "", "output: the OCI image layout directory (replaced if it holds one); the OCI archive goes to the same path with .tar")
	version := fs.String("version", "", "the release the image is tagged with; the manifest must pull that tag (empty: the manifest's tag)")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH of the image")
	root := fs.String("root", ".", "the repository's root")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(out, usage)
		fs.SetOutput(out)
		fs.PrintDefaults()
		return nil
	} else if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if *dir == "" || fs.NArg() > 0 {
		return exitcode.Usagef("want -image NAME -o DIR and no arguments (-h lists the flags)")
	}
	img, ok := images.ByName(*name)
	if !ok {
		return exitcode.Usagef("-image %q: want one of %s", *name, names())
	}
	b, err := images.Build(*root, img, *version, *dir, *arch)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "built %s (linux/%s, %s, binary %.1f MiB): OCI layout %s, archive %s; nothing pushed\n",
		b.Ref, *arch, b.Descriptor.Digest, float64(b.BinaryBytes)/(1<<20), b.Layout, b.Archive)
	return err
}

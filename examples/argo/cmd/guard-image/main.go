// Command guard-image builds the Argo guard's container image from this
// repository, without a container engine: the guard built as a static
// linux binary (CGO off, -trimpath, no build ID), put as /guard into a
// one-layer OCI image (internal/ociimage, standard library only) whose
// name and tag, and user, are those the Deployment
// (config/manager/manager.yaml) runs, so the two cannot drift. It writes an
// OCI image layout into -o and the same as an OCI archive into -o.tar, and
// pushes nothing:
//
//	go run ./cmd/guard-image -o ../../bin/guard-image   # make guard-image
//	skopeo copy oci:../../bin/guard-image:v0.1.0 docker://REGISTRY/finale-argo-guard:v0.1.0
//	ctr -n k8s.io images import ../../bin/guard-image.tar
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/examples/argo/internal/ociimage"
)

// Where the image's binary lives, and the Deployment's container that runs
// it.
const (
	binaryPath    = "/guard"
	containerName = "guard"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "guard-image:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("guard-image", flag.ContinueOnError)
	fs.SetOutput(out)
	dir := fs.String("o", "", "output: the OCI image layout directory (replaced if it holds one); the OCI archive goes to the same path with .tar")
	module := fs.String("module", ".", "the examples/argo module directory (the guard is built from ./cmd/guard in it)")
	manifest := fs.String("manifest", "", "the Deployment the image is for; default MODULE/config/manager/manager.yaml")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH of the image")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		return errors.New("usage: guard-image -o DIR [-module DIR] [-manifest FILE] [-arch GOARCH]")
	}
	if *manifest == "" {
		*manifest = filepath.Join(*module, "config", "manager", "manager.yaml")
	}
	ref, user, err := imageOf(*manifest)
	if err != nil {
		return err
	}
	bin, err := buildGuard(*module, *arch)
	if err != nil {
		return err
	}
	if err := replaceLayout(*dir); err != nil {
		return err
	}
	desc, err := ociimage.Write(*dir, ociimage.Image{
		Ref: ref, OS: "linux", Architecture: *arch, Entrypoint: []string{binaryPath}, User: user,
		Files: []ociimage.File{{Path: binaryPath, Mode: 0o755, Data: bin}},
	})
	if err != nil {
		return err
	}
	archive := filepath.Clean(*dir) + ".tar"
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	if err := ociimage.Archive(*dir, f); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(out, "built %s (linux/%s, %s, binary %.1f MiB): OCI layout %s, archive %s; nothing pushed\n",
		ref, *arch, desc.Digest, float64(len(bin))/(1<<20), *dir, archive)
	return nil
}

// imageOf reads the guard container's image and the Pod's user from the
// Deployment.
func imageOf(manifest string) (ref, user string, err error) {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return "", "", err
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		return "", "", fmt.Errorf("%s: %w", manifest, err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		if ociimage.Tag(c.Image) == "" {
			return "", "", fmt.Errorf("%s: container %s has image %q without a tag", manifest, containerName, c.Image)
		}
		sc := d.Spec.Template.Spec.SecurityContext
		if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil {
			return "", "", fmt.Errorf("%s: the Pod's securityContext names no runAsUser and runAsGroup for the image's user", manifest)
		}
		return c.Image, strconv.FormatInt(*sc.RunAsUser, 10) + ":" + strconv.FormatInt(*sc.RunAsGroup, 10), nil
	}
	return "", "", fmt.Errorf("%s: no container named %s", manifest, containerName)
}

// buildGuard builds ./cmd/guard in module as a static linux binary and
// returns its bytes. The binary is stripped (-s -w), so the compiler is
// told not to produce the DWARF the linker would drop: 8 % of a cold
// compile's CPU at the default GOGC (go build -race std).
func buildGuard(module, arch string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "guard-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "guard")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-gcflags=all=-dwarf=false", "-ldflags=-s -w -buildid=", "-o", out, "./cmd/guard")
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/guard in %s for linux/%s: %w", module, arch, err)
	}
	return os.ReadFile(out)
}

// replaceLayout empties dir when it holds an image layout (a previous build), and
// refuses any other non-empty directory.
func replaceLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("%s is neither empty nor an image layout; choose another -o", dir)
	}
	return os.RemoveAll(dir)
}

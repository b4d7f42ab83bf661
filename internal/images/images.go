package images

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/internal/ociimage"
)

// Image is one image a manifest pulls and where it is built from. Paths
// are relative to the repository's root.
type Image struct {
	// Name is the image's name in make targets and imagebuild -image
	// (make NAME-image).
	Name string
	// Module is the Go module directory the command is built in.
	Module string
	// Package is the command's package, relative to Module.
	Package string
	// Manifest is the Deployment that runs the image; Container its
	// container.
	Manifest, Container string
	// Binary is where the command is in the image, and its entrypoint.
	Binary string
}

// All lists every image finale's manifests pull.
var All = []Image{
	{Name: "guard", Module: "examples/argo", Package: "./cmd/guard",
		Manifest: "examples/argo/config/manager/manager.yaml", Container: "guard", Binary: "/guard"},
	{Name: "operator", Module: "examples/postgres", Package: "./cmd/operator",
		Manifest: "examples/postgres/config/manager/manager.yaml", Container: "operator", Binary: "/operator"},
}

// ByName finds an image of All.
func ByName(name string) (Image, bool) {
	for _, img := range All {
		if img.Name == name {
			return img, true
		}
	}
	return Image{}, false
}

// Messages.
const (
	msgNoTag       = "%s: container %s has image %q without a tag"
	msgWrongTag    = "%s: container %s pulls %q, tagged %s, but the version is %s: an image built at %s is one nothing pulls (change the manifests and VERSION together)"
	msgNoUser      = "%s: the Pod's securityContext names no runAsUser and runAsGroup for the image's user"
	msgNoContainer = "%s: no container named %s"
	msgNotLayout   = "%s is neither empty nor an image layout; choose another output"
)

// Ref reads the image reference and user (UID:GID) the Deployment runs
// img with; version, when set, must be the reference's tag.
func Ref(root string, img Image, version string) (ref, user string, err error) {
	manifest := filepath.Join(root, img.Manifest)
	b, err := os.ReadFile(manifest)
	if err != nil {
		return "", "", err
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		return "", "", fmt.Errorf("%s: %w", manifest, err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != img.Container {
			continue
		}
		tag := ociimage.Tag(c.Image)
		if tag == "" {
			return "", "", fmt.Errorf(msgNoTag, manifest, img.Container, c.Image)
		}
		if version != "" && tag != version {
			return "", "", fmt.Errorf(msgWrongTag, manifest, img.Container, c.Image, tag, version, version)
		}
		sc := d.Spec.Template.Spec.SecurityContext
		if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil {
			return "", "", fmt.Errorf(msgNoUser, manifest)
		}
		return c.Image, strconv.FormatInt(*sc.RunAsUser, 10) + ":" + strconv.FormatInt(*sc.RunAsGroup, 10), nil
	}
	return "", "", fmt.Errorf(msgNoContainer, manifest, img.Container)
}

// Built is what Build wrote.
type Built struct {
	Ref         string
	Descriptor  ociimage.Descriptor
	Layout      string
	Archive     string
	BinaryBytes int
}

// Build builds img from the repository at root for linux/arch, at version
// (the manifest's tag must be it; empty takes the manifest's), into the
// OCI layout dir (replaced if it holds one) and the archive dir.tar.
func Build(root string, img Image, version, dir, arch string) (Built, error) {
	ref, user, err := Ref(root, img, version)
	if err != nil {
		return Built{}, err
	}
	bin, err := buildBinary(filepath.Join(root, img.Module), img.Package, arch)
	if err != nil {
		return Built{}, err
	}
	if err := replaceLayout(dir); err != nil {
		return Built{}, err
	}
	desc, err := ociimage.Write(dir, ociimage.Image{
		Ref: ref, OS: "linux", Architecture: arch, Entrypoint: []string{img.Binary}, User: user,
		Files: []ociimage.File{{Path: img.Binary, Mode: 0o755, Data: bin}},
	})
	if err != nil {
		return Built{}, err
	}
	archive := filepath.Clean(dir) + ".tar"
	f, err := os.Create(archive)
	if err != nil {
		return Built{}, err
	}
	if err := ociimage.Archive(dir, f); err != nil {
		_ = f.Close()
		return Built{}, err
	}
	if err := f.Close(); err != nil {
		return Built{}, err
	}
	return Built{Ref: ref, Descriptor: desc, Layout: dir, Archive: archive, BinaryBytes: len(bin)}, nil
}

// buildBinary builds pkg in module as a static linux binary and returns
// its bytes. The binary is stripped (-s -w), so the compiler is told not
// to produce the DWARF the linker would drop: 8 % of a cold compile's CPU
// at the default GOGC (go build -race std).
func buildBinary(module, pkg, arch string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "finale-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "bin")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-gcflags=all=-dwarf=false", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s in %s for linux/%s: %w", pkg, module, arch, err)
	}
	return os.ReadFile(out)
}

// replaceLayout empties dir when it holds an image layout (a previous
// build), and refuses any other non-empty directory.
func replaceLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf(msgNotLayout, dir)
	}
	return os.RemoveAll(dir)
}

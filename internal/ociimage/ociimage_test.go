package ociimage_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/finale-dev/finale/internal/ociimage"
)

func testImage() ociimage.Image {
	return ociimage.Image{
		Ref: "registry.example/team/tool:v1.2.3", OS: "linux", Architecture: "amd64",
		Entrypoint: []string{"/bin/tool"}, User: "65532:65532",
		Files: []ociimage.File{{Path: "/bin/tool", Mode: 0o755, Data: []byte("#!/bin/sh\necho hi\n")}},
	}
}

// An image written is read back whole: index, manifest, config and layer
// agree on digests and sizes, the index names the tag and the full
// reference, and the file keeps its bytes and mode.
func TestWriteLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	desc, err := ociimage.Write(dir, testImage())
	if err != nil {
		t.Fatal(err)
	}
	got, err := ociimage.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(desc, got.Descriptor); diff != "" {
		t.Errorf("descriptor (-Write +Load):\n%s", diff)
	}
	wantAnn := map[string]string{ociimage.AnnotationRefName: "v1.2.3", ociimage.AnnotationImageName: "registry.example/team/tool:v1.2.3"}
	if diff := cmp.Diff(wantAnn, got.Descriptor.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	wantRun := ociimage.RuntimeConfig{User: "65532:65532", Entrypoint: []string{"/bin/tool"}, WorkingDir: "/"}
	if diff := cmp.Diff(wantRun, got.Config.Config); diff != "" {
		t.Errorf("runtime config (-want +got):\n%s", diff)
	}
	if got.Config.OS != "linux" || got.Config.Architecture != "amd64" || got.Manifest.Layers[0].MediaType != ociimage.MediaTypeLayer {
		t.Errorf("config %s/%s, layer %s", got.Config.OS, got.Config.Architecture, got.Manifest.Layers[0].MediaType)
	}
	f, err := got.File("/bin/tool")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(testImage().Files[0], f); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
}

// The same inputs give the same digest: nothing of the time or place of
// the build gets in.
func TestWriteIsReproducible(t *testing.T) {
	a, err := ociimage.Write(filepath.Join(t.TempDir(), "a"), testImage())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ociimage.Write(filepath.Join(t.TempDir(), "b"), testImage())
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest {
		t.Errorf("two writes of one image: %s and %s", a.Digest, b.Digest)
	}
}

// A blob changed after the write is refused by Load.
func TestLoadChecksDigests(t *testing.T) {
	dir := t.TempDir()
	desc, err := ociimage.Write(dir, testImage())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(desc.Digest, "sha256:"))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append(b, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ociimage.Load(dir); err == nil || !strings.Contains(err.Error(), desc.Digest) {
		t.Errorf("Load of a changed manifest = %v, want an error naming its digest", err)
	}
}

func TestWriteRefuses(t *testing.T) {
	for name, mod := range map[string]func(*ociimage.Image){
		"no tag":          func(i *ociimage.Image) { i.Ref = "registry.example:5000/team/tool" },
		"no entrypoint":   func(i *ociimage.Image) { i.Entrypoint = nil },
		"relative path":   func(i *ociimage.Image) { i.Files[0].Path = "bin/tool" },
		"no architecture": func(i *ociimage.Image) { i.Architecture = "" },
	} {
		t.Run(name, func(t *testing.T) {
			img := testImage()
			img.Files = append([]ociimage.File(nil), img.Files...)
			mod(&img)
			if _, err := ociimage.Write(t.TempDir(), img); err == nil {
				t.Error("Write succeeded")
			}
		})
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ociimage.Write(dir, testImage()); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Write into a non-empty directory = %v", err)
	}
}

// The archive holds the layout's files under their relative names.
func TestArchive(t *testing.T) {
	dir := t.TempDir()
	if _, err := ociimage.Write(dir, testImage()); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ociimage.Archive(dir, &buf); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[hdr.Name] = true
	}
	for _, want := range []string{"oci-layout", "index.json", "blobs/", "blobs/sha256/"} {
		if !names[want] {
			t.Errorf("archive lacks %s: %v", want, names)
		}
	}
}

func TestTag(t *testing.T) {
	for ref, want := range map[string]string{
		"ghcr.io/finale-dev/finale-argo-guard:v0.1.0": "v0.1.0",
		"localhost:5000/tool":                         "",
		"localhost:5000/tool:1":                       "1",
		"tool":                                        "",
	} {
		if got := ociimage.Tag(ref); got != want {
			t.Errorf("Tag(%q) = %q, want %q", ref, got, want)
		}
	}
}

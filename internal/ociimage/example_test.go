package ociimage_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/finale-dev/finale/internal/ociimage"
)

// An image of one static binary, written as an OCI image layout.
func ExampleWrite() {
	dir, err := os.MkdirTemp("", "ociimage-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	desc, err := ociimage.Write(filepath.Join(dir, "layout"), ociimage.Image{
		Ref: "registry.example/tool:v1", OS: "linux", Architecture: "amd64",
		Entrypoint: []string{"/tool"}, User: "65532:65532",
		Files: []ociimage.File{{Path: "/tool", Mode: 0o755, Data: []byte("binary")}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(desc.MediaType, desc.Annotations[ociimage.AnnotationRefName])
	// Output: application/vnd.oci.image.manifest.v1+json v1
}

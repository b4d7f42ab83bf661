package images_test

import (
	"fmt"

	"github.com/finale-dev/finale/internal/images"
)

// Each image finale's manifests pull: make NAME-image builds it.
func Example() {
	for _, img := range images.All {
		fmt.Printf("make %s-image: %s/%s -> %s in %s\n", img.Name, img.Module, img.Package[2:], img.Binary, img.Manifest)
	}
	// Output:
	// make guard-image: examples/argo/cmd/guard -> /guard in examples/argo/config/manager/manager.yaml
	// make operator-image: examples/postgres/cmd/operator -> /operator in examples/postgres/config/manager/manager.yaml
}

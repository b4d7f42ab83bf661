package crdfile_test

import (
	"fmt"
	"testing/fstest"

	"github.com/finale-dev/finale/internal/crdfile"
)

func ExampleDecode() {
	fsys := fstest.MapFS{"example.com_widgets.yaml": {Data: []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
`)}}
	crds, err := crdfile.Decode(fsys, "example.com")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(crds[0].Name)
	// Output: widgets.example.com
}

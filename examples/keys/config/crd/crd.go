package crd

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// ControllerGen is the controller-gen the files are generated with; the
// drift test runs exactly this one.
const ControllerGen = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"

// filePrefix marks the generated CRD files among the directory's YAML.
const filePrefix = "keys.finale.dev_"

//go:embed keys.finale.dev_*.yaml
var files embed.FS

// Files are the names of the generated CRD files, in lexical order.
func Files() ([]string, error) {
	return fs.Glob(files, filePrefix+"*.yaml")
}

// CRDs decodes the generated definitions: APIKeys, KeyServers.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := Files()
	if err != nil {
		return nil, fmt.Errorf("list CRD files: %w", err)
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, name := range names {
		raw, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("decode %s: %w", name, err)
		}
		if crd.Kind != "CustomResourceDefinition" || !strings.HasSuffix(crd.Name, ".keys.finale.dev") {
			return nil, fmt.Errorf("%s: not a keys.finale.dev CustomResourceDefinition (kind %q, name %q)", name, crd.Kind, crd.Name)
		}
		out = append(out, crd)
	}
	return out, nil
}

package crdfile

import (
	"fmt"
	"io/fs"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Files are the names of group's generated CRD files in fsys
// (controller-gen names them GROUP_PLURAL.yaml), in lexical order.
func Files(fsys fs.FS, group string) ([]string, error) {
	return fs.Glob(fsys, group+"_*.yaml")
}

// Decode decodes group's generated CRD files in fsys strictly: a file that
// has an unknown field, is not a CustomResourceDefinition, or defines a kind
// of another group is an error, so that a stray file is never installed.
func Decode(fsys fs.FS, group string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := Files(fsys, group)
	if err != nil {
		return nil, fmt.Errorf("list %s CRD files: %w", group, err)
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("decode %s: %w", name, err)
		}
		if crd.Kind != "CustomResourceDefinition" || !strings.HasSuffix(crd.Name, "."+group) {
			return nil, fmt.Errorf("%s: not a %s CustomResourceDefinition (kind %q, name %q)", name, group, crd.Kind, crd.Name)
		}
		out = append(out, crd)
	}
	return out, nil
}

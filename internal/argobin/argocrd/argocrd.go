package argocrd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/internal/argobin"
)

// crdDir is where Argo keeps the CRDs it installs by default: schemas that
// preserve unknown fields in spec and status, as upstream's quick start
// uses them.
const crdDir = "manifests/base/crds/minimal"

// CRDs returns Argo's minimal CRDs at argobin.Version, read from the module cache.
func CRDs(ctx context.Context) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dir, err := argobin.ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	root := os.DirFS(filepath.Join(dir, crdDir))
	names, err := fs.Glob(root, "argoproj.io_*.yaml")
	if err != nil {
		return nil, fmt.Errorf("argocrd: %w", err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("argocrd: no CRDs in %s", filepath.Join(dir, crdDir))
	}
	slices.Sort(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, n := range names {
		b, err := fs.ReadFile(root, n)
		if err != nil {
			return nil, fmt.Errorf("argocrd: %w", err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(bytes.TrimSpace(b), &crd); err != nil {
			return nil, fmt.Errorf("argocrd: parse %s: %w", n, err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Spec.Group != "argoproj.io" {
			return nil, errors.New("argocrd: " + n + " is not an argoproj.io CustomResourceDefinition")
		}
		out = append(out, &crd)
	}
	return out, nil
}

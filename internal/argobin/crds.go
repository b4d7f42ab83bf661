package argobin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdDir is where Argo keeps the CRDs it installs by default: schemas that
// preserve unknown fields in spec and status, as upstream's quick start
// uses them.
const crdDir = "manifests/base/crds/minimal"

// ModuleDir returns the directory of the argo-workflows module in the Go
// module cache, downloading it (offline when the cache has it, verified by
// tools/argo's go.sum) when it is missing.
func ModuleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("argobin: go env GOMODCACHE: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), Module+"@"+Version)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		return dir, nil
	}
	src, err := binbuildSource()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", Module+"@"+Version)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off", "GONOSUMDB="+NoSumDB)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("argobin: go mod download %s@%s in %s: %w\n%s", Module, Version, src, err, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("argobin: %s not in the module cache after go mod download: %w", Module, err)
	}
	return dir, nil
}

// binbuildSource is a directory holding tools/argo's go.mod and go.sum: the
// checkout's, else the copy the last build left in the cache.
func binbuildSource() (string, error) {
	if d, err := findModule(); err == nil {
		return d, nil
	}
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, ".src")
	if _, err := os.Stat(filepath.Join(src, "go.sum")); err != nil {
		return "", fmt.Errorf("argobin: neither a finale checkout nor a built %s (run `make argo`): %w", dir, err)
	}
	return src, nil
}

// CRDs returns Argo's minimal CRDs at Version, read from the module cache.
func CRDs(ctx context.Context) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dir, err := ModuleDir(ctx)
	if err != nil {
		return nil, err
	}
	root := os.DirFS(filepath.Join(dir, crdDir))
	names, err := fs.Glob(root, "argoproj.io_*.yaml")
	if err != nil {
		return nil, fmt.Errorf("argobin: %w", err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("argobin: no CRDs in %s", filepath.Join(dir, crdDir))
	}
	slices.Sort(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, n := range names {
		b, err := fs.ReadFile(root, n)
		if err != nil {
			return nil, fmt.Errorf("argobin: %w", err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(bytes.TrimSpace(b), &crd); err != nil {
			return nil, fmt.Errorf("argobin: parse %s: %w", n, err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Spec.Group != "argoproj.io" {
			return nil, errors.New("argobin: " + n + " is not an argoproj.io CustomResourceDefinition")
		}
		out = append(out, &crd)
	}
	return out, nil
}

package argobin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

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

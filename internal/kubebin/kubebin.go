package kubebin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Pinned versions. Changing tools/kube changes the stamp and forces a rebuild;
// changing these constants changes the cache directory as well.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.0"
)

// Binary names, as found in the directory Ensure returns.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	Kubectl               = "kubectl"
)

// EnvDir names the environment variable that overrides the cache directory.
const EnvDir = "FINALE_KUBE_BIN_DIR"

const (
	moduleDir  = "tools/kube"
	modulePath = "github.com/finale-dev/finale/tools/kube"
	stampFile  = "stamp"
	lockFile   = ".lock"
)

// targets are built in this order: the quick one first, so a broken toolchain
// shows up in seconds rather than after the apiserver's five minutes.
var targets = []struct{ name, pkg string }{
	{Etcd, "./cmd/etcd"},
	{Kubectl, "k8s.io/kubernetes/cmd/kubectl"},
	{KubeControllerManager, "k8s.io/kubernetes/cmd/kube-controller-manager"},
	{KubeAPIServer, "k8s.io/kubernetes/cmd/kube-apiserver"},
}

// Dir returns the directory that holds, or will hold, the binaries.
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kubebin: no cache directory (set %s): %w", EnvDir, err)
	}
	return filepath.Join(base, "finale", "kube-"+KubernetesVersion+"-etcd-"+EtcdVersion), nil
}

// Path returns the full path of one binary in dir.
func Path(dir, name string) string { return filepath.Join(dir, name) }

// Ensure returns the directory holding up-to-date binaries, building them
// first when they are missing or were built from a different tools/kube.
// Progress goes to log (nil discards it).
func Ensure(ctx context.Context, log io.Writer) (string, error) {
	if log == nil {
		log = io.Discard
	}
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kubebin: %w", err)
	}
	unlock, err := lock(filepath.Join(dir, lockFile))
	if err != nil {
		return "", err
	}
	defer unlock()

	src, srcErr := findSource()
	if srcErr != nil {
		// Outside a finale checkout: binaries that are already there are used
		// as they are, since there is nothing to compare them with.
		if present(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("kubebin: binaries missing in %s and %w; run `make kube` in a finale checkout, or set %s to a directory holding %s", dir, srcErr, EnvDir, strings.Join(names(), ", "))
	}
	want, err := stamp(src)
	if err != nil {
		return "", err
	}
	if got, _ := os.ReadFile(filepath.Join(dir, stampFile)); present(dir) && string(got) == want {
		return dir, nil
	}
	fmt.Fprintf(log, "kubebin: building Kubernetes %s and etcd %s from Go modules into %s (a cold build takes about 8 minutes on 2 cores)\n", KubernetesVersion, EtcdVersion, dir)
	start := time.Now()
	for _, t := range targets {
		if err := build(ctx, log, src, dir, t.name, t.pkg); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, stampFile), []byte(want), 0o644); err != nil {
		return "", fmt.Errorf("kubebin: %w", err)
	}
	fmt.Fprintf(log, "kubebin: all binaries ready in %s\n", time.Since(start).Round(time.Second))
	return dir, nil
}

func names() []string {
	out := make([]string, 0, len(targets))
	for _, t := range targets {
		out = append(out, t.name)
	}
	return out
}

func present(dir string) bool {
	for _, t := range targets {
		if fi, err := os.Stat(Path(dir, t.name)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func build(ctx context.Context, log io.Writer, src, dir, name, pkg string) error {
	tmp := Path(dir, "."+name+".tmp")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags(), "-o", tmp, pkg)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	fmt.Fprintf(log, "kubebin: building %s ...\n", name)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kubebin: build %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("kubebin: build %s: %w\n%s", name, err, tail(out.String(), 40))
			}
			fmt.Fprintf(log, "kubebin: built %s in %s\n", name, time.Since(start).Round(time.Second))
			return os.Rename(tmp, Path(dir, name))
		case <-tick.C:
			fmt.Fprintf(log, "kubebin: still building %s (%s)\n", name, time.Since(start).Round(time.Second))
		}
	}
}

func ldflags() string {
	minor := strings.Split(strings.TrimPrefix(KubernetesVersion, "v"), ".")[1]
	var b strings.Builder
	b.WriteString("-s -w")
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fmt.Fprintf(&b, " -X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean", p, KubernetesVersion, p, p, minor, p)
	}
	return b.String()
}

// findSource locates tools/kube: from the source file's own path when built
// without -trimpath, else upwards from the working directory.
func findSource() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			candidate := filepath.Join(d, moduleDir)
			if b, err := os.ReadFile(filepath.Join(candidate, "go.mod")); err == nil && bytes.Contains(b, []byte("module "+modulePath+"\n")) {
				return candidate, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("no " + moduleDir + " module found above the working directory")
}

// stamp hashes what decides the binaries' content.
func stamp(src string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", ldflags(), runtime.Version())
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		hashed := strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "go.mod") || strings.HasSuffix(p, "go.sum")
		if d.IsDir() || !hashed {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("kubebin: hash %s: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubebin: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("kubebin: lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

package binbuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

const (
	stampFile = "stamp"
	lockFile  = ".lock"
	srcDir    = ".src"
)

// Target is one binary: its file name in the cache directory and the
// package it is built from (a path in the build module, or a package of
// one of its dependencies).
type Target struct {
	Name, Package string
}

// Spec describes one set of binaries built from one module.
type Spec struct {
	// Prefix starts every progress line ("kubebin", say).
	Prefix string
	// What names the binaries for people ("Kubernetes v1.37.2 and etcd
	// v3.7.0").
	What string
	// Dir is the cache directory the binaries go to.
	Dir string
	// Source holds the build module: go.mod, go.sum and the .go files of
	// its own packages. Only those files are copied and hashed.
	Source fs.FS
	// Targets are built in order; put the quickest first, so a broken
	// toolchain shows in seconds.
	Targets []Target
	// LDFlags are passed to go build -ldflags (version stamps, -s -w).
	LDFlags string
	// Env is added to the build's environment (GONOSUMDB=..., say).
	Env []string
	// Cold says how long a cold build takes, for the first progress line.
	Cold string
}

// Path returns the path of the binary name in dir.
func Path(dir, name string) string { return filepath.Join(dir, name) }

// CacheDir returns $env when set, else <user cache dir>/finale/<name>. An
// empty env names no variable: only the user cache directory moves it.
func CacheDir(env, name string) (string, error) {
	if d := os.Getenv(env); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	switch {
	case err != nil && env == "":
		return "", fmt.Errorf("binbuild: no cache directory for %s: %w", name, err)
	case err != nil:
		return "", fmt.Errorf("binbuild: no cache directory for %s (set %s): %w", name, env, err)
	}
	return filepath.Join(base, "finale", name), nil
}

func (s Spec) check() error {
	var missing []string
	if s.Dir == "" {
		missing = append(missing, "Dir")
	}
	if s.Source == nil {
		missing = append(missing, "Source")
	}
	if len(s.Targets) == 0 {
		missing = append(missing, "Targets")
	}
	if len(missing) > 0 {
		return fmt.Errorf("binbuild: Spec for %q lacks %s", s.What, strings.Join(missing, ", "))
	}
	if _, err := fs.Stat(s.Source, "go.mod"); err != nil {
		return fmt.Errorf("binbuild: the build module of %s has no go.mod: %w", s.What, err)
	}
	return nil
}

// Ensure returns s.Dir once it holds binaries built from exactly s, building
// them first when any is missing or the stamp differs. Progress goes to log
// (nil discards it).
func (s Spec) Ensure(ctx context.Context, log io.Writer) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	if log == nil {
		log = io.Discard
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return "", fmt.Errorf("binbuild: %w", err)
	}
	unlock, err := Lock(filepath.Join(s.Dir, lockFile))
	if err != nil {
		return "", err
	}
	defer unlock()
	want, err := s.Stamp()
	if err != nil {
		return "", err
	}
	if s.Current(want) {
		return s.Dir, nil
	}
	fmt.Fprintf(log, "%s: building %s from Go modules into %s (a cold build takes %s)\n", s.Prefix, s.What, s.Dir, s.Cold)
	start := time.Now()
	// A stale stamp must not survive a half-finished rebuild.
	if err := os.Remove(filepath.Join(s.Dir, stampFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("binbuild: %w", err)
	}
	src := filepath.Join(s.Dir, srcDir)
	if err := writeSource(s.Source, src); err != nil {
		return "", err
	}
	for _, t := range s.Targets {
		if err := s.build(ctx, log, src, t); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(s.Dir, stampFile), []byte(want), 0o644); err != nil {
		return "", fmt.Errorf("binbuild: %w", err)
	}
	fmt.Fprintf(log, "%s: %s ready in %s\n", s.Prefix, s.What, time.Since(start).Round(time.Second))
	return s.Dir, nil
}

// Current reports whether s.Dir holds every target and the stamp want.
func (s Spec) Current(want string) bool {
	got, err := os.ReadFile(filepath.Join(s.Dir, stampFile))
	if err != nil || string(got) != want {
		return false
	}
	for _, t := range s.Targets {
		if fi, err := os.Stat(Path(s.Dir, t.Name)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// Stamp hashes everything that decides the binaries' content: the build
// module's files, the targets, the flags, the environment additions and
// the Go toolchain.
func (s Spec) Stamp() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "binbuild/v1\n%s\n%s\n%s\n%q\n", runtime.Version(), gcflags, s.LDFlags, s.Env)
	for _, t := range s.Targets {
		fmt.Fprintf(h, "target %s %s\n", t.Name, t.Package)
	}
	files, err := sourceFiles(s.Source)
	if err != nil {
		return "", err
	}
	for _, p := range files {
		b, err := fs.ReadFile(s.Source, p)
		if err != nil {
			return "", fmt.Errorf("binbuild: read %s: %w", p, err)
		}
		fmt.Fprintf(h, "%s %d\n", p, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sourceFiles lists the files of the build module that are copied and
// hashed, sorted.
func sourceFiles(src fs.FS) ([]string, error) {
	var out []string
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		base := path(p)
		if d.IsDir() {
			// Hidden directories and nested modules are not part of the
			// build module (the cache may even sit inside it).
			if p != "." && (strings.HasPrefix(base, ".") || isModule(src, p)) {
				return fs.SkipDir
			}
			return nil
		}
		if base == "go.mod" || base == "go.sum" || (strings.HasSuffix(base, ".go") && !strings.HasSuffix(base, "_test.go")) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("binbuild: list the build module: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

func isModule(src fs.FS, dir string) bool {
	_, err := fs.Stat(src, dir+"/go.mod")
	return err == nil
}

func path(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// writeSource replaces dst with a copy of the build module's files.
func writeSource(src fs.FS, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("binbuild: %w", err)
	}
	files, err := sourceFiles(src)
	if err != nil {
		return err
	}
	for _, p := range files {
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return fmt.Errorf("binbuild: read %s: %w", p, err)
		}
		out := filepath.Join(dst, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return fmt.Errorf("binbuild: %w", err)
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return fmt.Errorf("binbuild: %w", err)
		}
	}
	return nil
}

// gcflags has the compiler leave out DWARF: the servers are linked with
// -s -w (Spec.LDFlags), which drops it anyway, and generating it cost 8 %
// of the compile's CPU at the default GOGC and 16 % at GOGC=400 (go build
// -race std, cold; make test builds the servers at 400). make test's
// tools/* tests pass the same flags to reuse the compiled packages.
const gcflags = "all=-dwarf=false"

func (s Spec) build(ctx context.Context, log io.Writer, src string, t Target) error {
	tmp := Path(s.Dir, "."+t.Name+".tmp")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-gcflags", gcflags, "-ldflags", s.LDFlags, "-o", tmp, t.Package)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off", "GOFLAGS=-mod=readonly")
	cmd.Env = append(cmd.Env, s.Env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	fmt.Fprintf(log, "%s: building %s ...\n", s.Prefix, t.Name)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("binbuild: build %s: %w", t.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("binbuild: build %s (%s) in %s: %w\n%s", t.Name, t.Package, src, err, tail(out.String(), 40))
			}
			fmt.Fprintf(log, "%s: built %s in %s\n", s.Prefix, t.Name, time.Since(start).Round(time.Second))
			if err := os.Rename(tmp, Path(s.Dir, t.Name)); err != nil {
				return fmt.Errorf("binbuild: %w", err)
			}
			return nil
		case <-tick.C:
			fmt.Fprintf(log, "%s: still building %s (%s)\n", s.Prefix, t.Name, time.Since(start).Round(time.Second))
		}
	}
}

// FindModule looks for the directory rel (tools/kube, say) holding the
// module modulePath, upwards from this source file's directory (when built
// without -trimpath) and from the working directory: the build modules
// under tools/ exist only in a finale checkout.
func FindModule(rel, modulePath string) (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			candidate := filepath.Join(d, rel)
			if b, err := os.ReadFile(filepath.Join(candidate, "go.mod")); err == nil && bytes.Contains(b, []byte("module "+modulePath+"\n")) {
				return candidate, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("binbuild: no %s (module %s) above the working directory: it exists only in a finale checkout", rel, modulePath)
}

// Lock takes an exclusive lock on the file at path (created if missing),
// so that two processes never build or install into one directory at
// once; the returned function releases it.
func Lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("binbuild: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("binbuild: lock %s: %w", path, err)
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

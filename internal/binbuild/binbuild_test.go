package binbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func module(main string) fstest.MapFS {
	return fstest.MapFS{
		"go.mod":              {Data: []byte("module example.com/hello\n\ngo 1.26\n")},
		"cmd/hello/main.go":   {Data: []byte(main)},
		"README":              {Data: []byte("not part of the build\n")},
		"cmd/hello/x_test.go": {Data: []byte("package main\n")},
	}
}

const hello = "package main\n\nimport \"fmt\"\n\nvar greeting = \"unset\"\n\nfunc main() { fmt.Println(greeting) }\n"

func TestStampFollowsWhatDecidesTheBuild(t *testing.T) {
	base := Spec{Dir: t.TempDir(), Source: module(hello), Targets: []Target{{Name: "hello", Package: "./cmd/hello"}}, LDFlags: "-s"}
	a, err := base.Stamp()
	if err != nil {
		t.Fatal(err)
	}
	same := base
	src := module(hello)
	src["README"] = &fstest.MapFile{Data: []byte("edited\n")}
	src["cmd/hello/x_test.go"] = &fstest.MapFile{Data: []byte("package main // edited\n")}
	same.Source = src
	if b, _ := same.Stamp(); b != a {
		t.Error("stamp changed for files that are not part of the build")
	}
	for name, s := range map[string]Spec{
		"source":  {Dir: base.Dir, Source: module(hello + "// x\n"), Targets: base.Targets, LDFlags: base.LDFlags},
		"ldflags": {Dir: base.Dir, Source: base.Source, Targets: base.Targets, LDFlags: "-s -w"},
		"targets": {Dir: base.Dir, Source: base.Source, Targets: []Target{{Name: "hi", Package: "./cmd/hello"}}, LDFlags: base.LDFlags},
		"env":     {Dir: base.Dir, Source: base.Source, Targets: base.Targets, LDFlags: base.LDFlags, Env: []string{"GONOSUMDB=x"}},
	} {
		if c, _ := s.Stamp(); c == a {
			t.Errorf("stamp did not change when the %s changed", name)
		}
	}
}

func TestEnsureBuildsOnceAndRebuildsOnAnyChange(t *testing.T) {
	s := Spec{
		Prefix: "test", What: "hello", Dir: t.TempDir(), Source: module(hello),
		Targets: []Target{{Name: "hello", Package: "./cmd/hello"}},
		LDFlags: "-X main.greeting=one", Cold: "seconds",
	}
	var log strings.Builder
	dir, err := s.Ensure(t.Context(), &log)
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, Path(dir, "hello")); got != "one" {
		t.Fatalf("built binary says %q, want one", got)
	}
	if !strings.Contains(log.String(), "test: building hello") {
		t.Errorf("no progress reported: %q", log.String())
	}
	before, _ := os.Stat(Path(dir, "hello"))

	log.Reset()
	if _, err := s.Ensure(t.Context(), &log); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(Path(dir, "hello"))
	if log.Len() != 0 || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("a current build was rebuilt: %q", log.String())
	}

	// Binaries someone else put there, or left from another version, are
	// never taken on trust: a different stamp rebuilds.
	s.LDFlags = "-X main.greeting=two"
	if _, err := s.Ensure(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := run(t, Path(dir, "hello")); got != "two" {
		t.Fatalf("after a change the binary says %q, want two", got)
	}
	if err := os.WriteFile(filepath.Join(dir, stampFile), []byte("forged"), 0o644); err != nil {
		t.Fatal(err)
	}
	want, _ := s.Stamp()
	if s.Current(want) {
		t.Fatal("a wrong stamp counts as current")
	}
	if err := os.Remove(Path(dir, "hello")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, stampFile), []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	if s.Current(want) {
		t.Fatal("a missing binary counts as current")
	}
}

func TestEnsureReportsBuildFailures(t *testing.T) {
	s := Spec{Prefix: "test", What: "broken", Dir: t.TempDir(), Source: module("package main\nfunc main() { undefined() }\n"),
		Targets: []Target{{Name: "hello", Package: "./cmd/hello"}}}
	_, err := s.Ensure(t.Context(), nil)
	if err == nil || !strings.Contains(err.Error(), "undefined") {
		t.Fatalf("Ensure = %v, want the compiler's message", err)
	}
	want, _ := s.Stamp()
	if s.Current(want) {
		t.Fatal("a failed build left a current stamp")
	}
}

func TestSpecChecked(t *testing.T) {
	for name, s := range map[string]Spec{
		"no dir":     {Source: module(hello), Targets: []Target{{Name: "a", Package: "."}}},
		"no source":  {Dir: t.TempDir(), Targets: []Target{{Name: "a", Package: "."}}},
		"no targets": {Dir: t.TempDir(), Source: module(hello)},
		"no go.mod":  {Dir: t.TempDir(), Source: fstest.MapFS{"main.go": {Data: []byte(hello)}}, Targets: []Target{{Name: "a", Package: "."}}},
	} {
		if _, err := s.Ensure(t.Context(), nil); err == nil {
			t.Errorf("%s: Ensure accepted the spec", name)
		}
	}
}

func TestCacheDirHonoursEnv(t *testing.T) {
	d := t.TempDir()
	t.Setenv("FINALE_TEST_BIN_DIR", d)
	if got, err := CacheDir("FINALE_TEST_BIN_DIR", "x"); err != nil || got != d {
		t.Fatalf("CacheDir = %q, %v; want %q", got, err, d)
	}
}

// TestCacheDirWithoutUserCache: the error names what moves the directory,
// and no empty variable ("set )").
func TestCacheDirWithoutUserCache(t *testing.T) {
	t.Setenv("HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("FINALE_TEST_BIN_DIR", "")
	for env, want := range map[string]string{
		"":                    "binbuild: no cache directory for x: ",
		"FINALE_TEST_BIN_DIR": "binbuild: no cache directory for x (set FINALE_TEST_BIN_DIR): ",
	} {
		_, err := CacheDir(env, "x")
		if err == nil {
			t.Fatalf("CacheDir(%q) found a directory without HOME or XDG_CACHE_HOME", env)
		}
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("CacheDir(%q) = %q, want it to start %q", env, err, want)
		}
	}
}

func TestFindModuleFromRepo(t *testing.T) {
	dir, err := FindModule("tools/kube", "github.com/finale-dev/finale/tools/kube")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cmd", "etcd", "main.go")); err != nil {
		t.Fatalf("FindModule = %s, which has no cmd/etcd: %v", dir, err)
	}
	if _, err := FindModule("tools/none", "example.com/none"); err == nil {
		t.Fatal("FindModule found a module that does not exist")
	}
}

func run(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

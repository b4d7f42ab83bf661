package binbuild

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestPackUnpackKeepsTheBuildAndItsStamp(t *testing.T) {
	src := module(hello)
	src["go.sum"] = &fstest.MapFile{Data: []byte("example.com/x v1.0.0 h1:abc=\n")}
	src["cmd/nested/go.mod"] = &fstest.MapFile{Data: []byte("module example.com/nested\n")}
	src["cmd/nested/main.go"] = &fstest.MapFile{Data: []byte("package main\n")}
	b, err := Pack(src, "a comment\n")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unpack(b)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Files(src)
	have, err := Files(got)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"cmd/hello/main.go", "go.mod", "go.sum"}, have); diff != "" {
		t.Errorf("files in the archive (-want +got):\n%s", diff)
	}
	for _, p := range want {
		a, _ := fs.ReadFile(src, p)
		b, _ := fs.ReadFile(got, p)
		if string(a) != string(b) {
			t.Errorf("%s changed in the archive: %q, was %q", p, b, a)
		}
	}
	s := Spec{Dir: t.TempDir(), Source: src, Targets: []Target{{Name: "hello", Package: "./cmd/hello"}}}
	fromDir, _ := s.Stamp()
	s.Source = got
	if fromArchive, _ := s.Stamp(); fromArchive != fromDir {
		t.Errorf("stamp from the archive %s, from the files %s", fromArchive, fromDir)
	}
}

func TestPackRefusesWhatItCannotKeep(t *testing.T) {
	for name, tc := range map[string]struct {
		main, says string
	}{
		"no final newline": {main: "package main\nfunc main() {}", says: "newline"},
		"a marker line":    {main: "package main\n\n/*\n-- go.mod --\n*/\nfunc main() {}\n", says: "marker"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Pack(module(tc.main), ""); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Pack = %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadCRDs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	crd := func(plural string) string {
		return "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: " + plural + ".x.dev\nspec:\n  group: x.dev\n  names: {kind: K, plural: " + plural + "}\n  scope: Namespaced\n"
	}
	two := write("ok/two.yaml", "# generated\n---\n"+crd("as")+"---\n"+crd("bs"))
	write("ok/notes.txt", "not a manifest")
	write("ok/three.json", `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"cs.x.dev"},"spec":{"group":"x.dev","names":{"kind":"C","plural":"cs"},"scope":"Namespaced"}}`)
	role := write("bad/role.yaml", crd("ds")+"---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\n")
	typo := write("typo/crd.yaml", crd("es")+"  scoop: Namespaced\n")
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}

	for name, tc := range map[string]struct {
		paths   []string
		want    []string
		errSays string
	}{
		"a file of two":              {paths: []string{two}, want: []string{"as.x.dev", "bs.x.dev"}},
		"a directory, yaml and json": {paths: []string{filepath.Join(dir, "ok")}, want: []string{"cs.x.dev", "as.x.dev", "bs.x.dev"}},
		"missing path":               {paths: []string{filepath.Join(dir, "nope")}, errSays: "no such file"},
		"empty directory":            {paths: []string{filepath.Join(dir, "empty")}, errSays: "holds no .yaml"},
		"another kind":               {paths: []string{role}, errSays: `document 2: kind "Role"`},
		"unknown field":              {paths: []string{typo}, errSays: "scoop"},
	} {
		t.Run(name, func(t *testing.T) {
			crds, err := readCRDs(tc.paths)
			if tc.errSays != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSays) {
					t.Fatalf("readCRDs = %v, want an error saying %q", err, tc.errSays)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range crds {
				got = append(got, c.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CRDs read (-want +got):\n%s", diff)
			}
		})
	}
}

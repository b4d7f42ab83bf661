package crdfile_test

import (
	"testing"
	"testing/fstest"

	"github.com/finale-dev/finale/internal/crdfile"
)

// Only a strict CustomResourceDefinition of the group is accepted.
func TestDecodeRefuses(t *testing.T) {
	crd := func(kind, name, extra string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte("apiVersion: apiextensions.k8s.io/v1\nkind: " + kind + "\nmetadata:\n  name: " + name + "\n" + extra)}
	}
	cases := map[string]*fstest.MapFile{
		"another kind":  crd("ConfigMap", "widgets.example.com", ""),
		"another group": crd("CustomResourceDefinition", "widgets.example.org", ""),
		"unknown field": crd("CustomResourceDefinition", "widgets.example.com", "bogus: 1\n"),
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := crdfile.Decode(fstest.MapFS{"example.com_widgets.yaml": f}, "example.com"); err == nil {
				t.Error("decoded; want an error")
			}
		})
	}
}

package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/controlplane"
)

// crdTimeout bounds the wait for one CRD to be established and served.
const crdTimeout = 30 * time.Second

var crdType = metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"}

// readCRDs reads the CRDs in paths: files, or directories of *.yaml,
// *.yml and *.json files.
func readCRDs(paths []string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("testenv: CRD path: %w", err)
		}
		files := []string{p}
		if fi.IsDir() {
			files = nil
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, fmt.Errorf("testenv: CRD path: %w", err)
			}
			for _, en := range entries {
				if ext := filepath.Ext(en.Name()); !en.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
					files = append(files, filepath.Join(p, en.Name()))
				}
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("testenv: CRD path %s holds no .yaml, .yml or .json file", p)
			}
		}
		for _, f := range files {
			crds, err := readCRDFile(f)
			if err != nil {
				return nil, err
			}
			out = append(out, crds...)
		}
	}
	return out, nil
}

func readCRDFile(path string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("testenv: %s: %w", path, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("testenv: %s, document %d: %w", path, n, err)
		}
		if tm == (metav1.TypeMeta{}) && len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue // an empty document: a leading ---, say
		}
		if tm != crdType {
			return nil, fmt.Errorf("testenv: %s, document %d: kind %q of apiVersion %q, not a %s of %s", path, n, tm.Kind, tm.APIVersion, crdType.Kind, crdType.APIVersion)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(doc, crd); err != nil {
			return nil, fmt.Errorf("testenv: %s, document %d: %w", path, n, err)
		}
		out = append(out, crd)
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// installCRDs creates crds, waits until each is established, then until
// discovery serves every served version of each: a client's REST mapper
// reads discovery, and an established CRD may not be in it yet.
func installCRDs(ctx context.Context, c client.Client, cfg *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	if len(crds) == 0 {
		return nil
	}
	if err := controlplane.InstallCRDs(ctx, c, crds...); err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gv, plural := crd.Spec.Group+"/"+v.Name, crd.Spec.Names.Plural
			err := controlplane.WaitFor(ctx, crdTimeout, plural+" in discovery of "+gv, func(context.Context) (bool, error) {
				list, err := dc.ServerResourcesForGroupVersion(gv)
				if err != nil {
					return false, nil // not yet served: a 404 until it is
				}
				return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }), nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

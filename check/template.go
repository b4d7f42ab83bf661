package check

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Values are what a description's templates see in one run.
//
//	{{.Namespace}}          the owner namespace of this run
//	{{.OperatorNamespace}}  the operator's namespace of this run (records, leases, keys)
//	{{.Kubeconfig}}         the kubeconfig file the operator gets
//	{{.CacheKubeconfig}}    a kubeconfig for its cache alone (see the stale-apiserver experiment)
//	{{.Proxy "db"}}         the fault proxy's host:port for fault point db
//	{{.ProxyHost "db"}}     its host, {{.ProxyPort "db"}} its port
//	{{.ServiceAddr}}        the loopback host:port chosen for the service check starts
//	{{.ServiceHost}}        its host, {{.ServicePort}} its port
//	{{.Index}}              the dependent's index (dependents.template)
//	{{.Run}}                a short name unique to the run (for external names, and cluster-scoped objects' names)
//	{{.Seed}}               the run's seed
//	{{.TempDir}}            a directory of check's own, removed at the end
//	{{.Dir}}                the description file's directory
//	{{env "NAME"}}          an environment variable; unset is an error
type Values struct {
	Namespace, OperatorNamespace string
	Kubeconfig, CacheKubeconfig  string
	ServiceAddr                  string
	Index                        int
	Run                          string
	Seed                         int64
	TempDir, Dir                 string

	proxies map[string]string
}

// Proxy is fault point name's proxy address.
func (v Values) Proxy(name string) (string, error) {
	a, ok := v.proxies[name]
	if !ok {
		names := make([]string, 0, len(v.proxies))
		for n := range v.proxies {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("no fault point %q (faults: %s)", name, strings.Join(names, ", "))
	}
	return a, nil
}

// ProxyHost is the host of fault point name's proxy.
func (v Values) ProxyHost(name string) (string, error) {
	a, err := v.Proxy(name)
	if err != nil {
		return "", err
	}
	h, _, err := net.SplitHostPort(a)
	return h, err
}

// ProxyPort is the port of fault point name's proxy.
func (v Values) ProxyPort(name string) (string, error) {
	a, err := v.Proxy(name)
	if err != nil {
		return "", err
	}
	_, p, err := net.SplitHostPort(a)
	return p, err
}

// ServiceHost is ServiceAddr's host.
func (v Values) ServiceHost() string { h, _, _ := net.SplitHostPort(v.ServiceAddr); return h }

// ServicePort is ServiceAddr's port.
func (v Values) ServicePort() string { _, p, _ := net.SplitHostPort(v.ServiceAddr); return p }

// ErrEnvUnset is returned by {{env "NAME"}} for an unset variable.
var ErrEnvUnset = errors.New("environment variable not set")

var funcs = template.FuncMap{
	"env": func(name string) (string, error) {
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("%w: %s", ErrEnvUnset, name)
		}
		return v, nil
	},
}

// expand evaluates one templated field.
func expand(field, text string, v Values) (string, error) {
	if !strings.Contains(text, "{{") {
		return text, nil
	}
	t, err := template.New(field).Funcs(funcs).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, v); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return b.String(), nil
}

func expandAll(field string, ts []string, v Values) ([]string, error) {
	out := make([]string, len(ts))
	for i, t := range ts {
		var err error
		if out[i], err = expand(fmt.Sprintf("%s[%d]", field, i), t, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// expandEnv returns os.Environ() plus m, expanded.
func expandEnv(field string, m map[string]string, v Values) ([]string, error) {
	env := os.Environ()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val, err := expand(field+"."+k, m[k], v)
		if err != nil {
			return nil, err
		}
		env = append(env, k+"="+val)
	}
	return env, nil
}

// decodeManifests decodes YAML (or JSON) documents into objects; empty
// documents are skipped.
func decodeManifests(text string) ([]*unstructured.Unstructured, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode manifest: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			return nil, fmt.Errorf("a manifest without apiVersion or kind: %v", m)
		}
		out = append(out, u)
	}
}

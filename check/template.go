package check

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// scope is which Values a templated field may use: its tmpl tag in Spec.
// A value out of its field's scope would be empty when the field is
// evaluated (the service starts before any run has a namespace), so Load
// refuses it instead.
type scope string

// The scopes, as the tmpl tags write them; "-" marks a string field that
// is not templated.
const (
	// scopeEnv: read before anything starts ({{env "NAME"}} alone).
	scopeEnv scope = "env"
	// scopeService: the external service and the fault points' real
	// addresses, started once before the runs.
	scopeService scope = "service"
	// scopeRun: what each run starts and creates.
	scopeRun scope = "run"
	// scopeDependent: one dependent, which has an index too.
	scopeDependent scope = "dependent"
	notTemplated   scope = "-"
)

// scopeValues are the Values each scope may use (env is always there).
var scopeValues = func() map[scope][]string {
	service := []string{"ServiceAddr", "ServiceHost", "ServicePort", "TempDir", "Dir"}
	run := append([]string{"Namespace", "OperatorNamespace", "Kubeconfig", "CacheKubeconfig", "Proxy", "ProxyHost", "ProxyPort", "Run", "Seed"}, service...)
	return map[scope][]string{
		scopeEnv:       nil,
		scopeService:   service,
		scopeRun:       run,
		scopeDependent: append(slices.Clone(run), "Index"),
	}
}()

// templatedField is one templated value of a description.
type templatedField struct {
	// path names it as an error does: operator.env.NAME, faults[0].address.
	path, text string
	scope      scope
}

// templated lists the description's templated values, found by their
// fields' tmpl tags, so that a field added with a tag is checked at load
// with no other change (and TestTemplatedFieldsTagged refuses a string
// field without one).
func (s *Spec) templated() []templatedField {
	var out []templatedField
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "-" || !sf.IsExported() {
				continue
			}
			p := joinPath(path, name)
			fv := v.Field(i)
			sc := scope(sf.Tag.Get("tmpl"))
			switch {
			case fv.Kind() == reflect.Pointer && !fv.IsNil() && fv.Elem().Kind() == reflect.Struct:
				walk(fv.Elem(), p)
			case fv.Kind() == reflect.Struct && sf.Type != reflect.TypeOf(metav1.Duration{}):
				walk(fv, p)
			case fv.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct:
				for j := range fv.Len() {
					walk(fv.Index(j), fmt.Sprintf("%s[%d]", p, j))
				}
			case sc == "" || sc == notTemplated:
			case fv.Kind() == reflect.String:
				if fv.String() != "" {
					out = append(out, templatedField{p, fv.String(), sc})
				}
			case fv.Kind() == reflect.Slice:
				for j := range fv.Len() {
					out = append(out, templatedField{fmt.Sprintf("%s[%d]", p, j), fv.Index(j).String(), sc})
				}
			case fv.Kind() == reflect.Map:
				keys := fv.MapKeys()
				slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
				for _, k := range keys {
					out = append(out, templatedField{p + "." + k.String(), fv.MapIndex(k).String(), sc})
				}
			}
		}
	}
	walk(reflect.ValueOf(s).Elem(), "")
	return out
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// A value a field may not use, or one the description gives nothing for.
const (
	msgOutOfScope = "%s: {{.%s}} has no value here; this field may use %s"
	msgNoService  = "%s: {{.%s}} has no value: the description starts no service (service.command)"
)

// checkTemplate parses one templated value, refuses a value out of its
// scope (or the service's address when check starts no service), and
// evaluates it with placeholder values.
func checkTemplate(f templatedField, v Values, service bool) error {
	if !strings.Contains(f.text, "{{") {
		return nil
	}
	t, err := template.New(f.path).Funcs(funcs).Option("missingkey=error").Parse(f.text)
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	used := map[string]bool{}
	valuesUsed(t.Root, used)
	allowed := scopeValues[f.scope]
	for _, name := range slices.Sorted(maps.Keys(used)) {
		if !slices.Contains(allowed, name) {
			return fmt.Errorf(msgOutOfScope, f.path, name, scopeText(f.scope))
		}
		if !service && strings.HasPrefix(name, "Service") {
			return fmt.Errorf(msgNoService, f.path, name)
		}
	}
	_, err = expand(f.path, f.text, v)
	return err
}

// scopeText lists what a scope may use, as the docs and errors write it.
func scopeText(sc scope) string {
	var parts []string
	for _, n := range scopeValues[sc] {
		if strings.HasPrefix(n, "Proxy") {
			n += ` "name"` // a fault point's
		}
		parts = append(parts, "{{."+n+"}}")
	}
	return strings.Join(append(parts, `{{env "NAME"}}`), ", ")
}

// valuesUsed adds to used the Values a template names: {{.Namespace}},
// {{.Proxy "db"}}, {{$.Run}}. Inside range and with, dot is something
// else, so only their pipelines and else branches are read.
func valuesUsed(n parse.Node, used map[string]bool) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			valuesUsed(c, used)
		}
	case *parse.ActionNode:
		valuesUsed(n.Pipe, used)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			valuesUsed(c, used)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			valuesUsed(a, used)
		}
	case *parse.FieldNode:
		used[n.Ident[0]] = true
	case *parse.VariableNode:
		if n.Ident[0] == "$" && len(n.Ident) > 1 {
			used[n.Ident[1]] = true
		}
	case *parse.ChainNode:
		valuesUsed(n.Node, used)
	case *parse.IfNode:
		valuesUsed(n.Pipe, used)
		valuesUsed(n.List, used)
		valuesUsed(n.ElseList, used)
	case *parse.RangeNode:
		valuesUsed(n.Pipe, used)
		valuesUsed(n.ElseList, used)
	case *parse.WithNode:
		valuesUsed(n.Pipe, used)
		valuesUsed(n.ElseList, used)
	}
}

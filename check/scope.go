package check

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A kind is cluster-scoped or namespaced as the control plane serves it:
// Run asks the control plane's RESTMapper once its CRDs are installed, so
// that a description never states a scope (and built-in kinds count).
// Load, which starts nothing, reads the scopes the CRD files declare, so
// that --validate refuses what Run would.

// scopeFunc says whether a kind is cluster-scoped; known is false for a
// kind it cannot tell about.
type scopeFunc func(schema.GroupVersionKind) (cluster, known bool, err error)

// scopes are the run's kinds that are cluster-scoped, as checked.
type scopes struct {
	// cluster holds each cluster-scoped kind of the world and of
	// operator.manifests.
	cluster map[schema.GroupKind]bool
	// fields names, for the report, each world field whose kind is
	// cluster-scoped, with the kind: "dependents (Widget)".
	fields []string
	// children: results.children's kind is cluster-scoped.
	children bool
}

func (s scopes) clusterScoped(o *unstructured.Unstructured) bool {
	return s.cluster[o.GroupVersionKind().GroupKind()]
}

// msgNotRunUnique refuses a cluster-scoped object named alike in every
// run: no namespace keeps two runs' objects apart.
const msgNotRunUnique = "%s: %s is cluster-scoped and its name %q is the same in every run, so runs would clash " +
	"(no namespace keeps them apart): put {{.Run}} (or {{.Namespace}}) in its metadata.name (name: %s-{{.Run}})"

// msgNotServed is a kind of the description the control plane does not
// serve.
const msgNotServed = "%s: %s %s is not served by the control plane (is its CRD in crds?): %w"

// checkScopes resolves the scope of every kind of the world (the Secret,
// the parent, the dependents, the result-capture children) and of
// operator.manifests with scope, and refuses a cluster-scoped object whose
// name is not unique to the run (the same with another run's values). Errors wrap ErrSpec and name
// their field.
func (s *Spec) checkScopes(scope scopeFunc) (scopes, error) {
	out := scopes{cluster: map[schema.GroupKind]bool{}}
	var errs []error
	v := s.placeholders()
	// other is another run's values: whatever makes a name differ
	// between runs (the seed and the directories do not).
	other := v
	other.Run, other.Namespace, other.OperatorNamespace = v.Run+"x", v.Namespace+"x", v.OperatorNamespace+"x"
	// name is how the report names a world field; the operator's
	// manifests are no part of the world (the owner namespace's deletion
	// does not concern them), only of the run.
	fields := []struct{ field, name, text string }{
		{"parent.secret", "parent Secret", s.Parent.Secret},
		{"parent.object", "parent", s.Parent.Object},
		{"dependents.template", "dependents", s.Dependents.Template},
		{"operator.manifests", "", s.Operator.Manifests},
	}
	for _, f := range fields {
		if f.text == "" || (f.field == "parent.secret" && !s.hasSecret()) {
			continue
		}
		these, err := s.objects(f.field, f.text, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		those, err := s.objects(f.field, f.text, other)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i, this := range these {
			cluster, known, err := scope(this.GroupVersionKind())
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf(msgNotServed, f.field, this.GetAPIVersion(), this.GetKind(), err))
				continue
			case !known || !cluster:
				continue
			}
			out.cluster[this.GroupVersionKind().GroupKind()] = true
			if f.name != "" {
				out.fields = append(out.fields, fmt.Sprintf("%s (%s)", f.name, this.GetKind()))
			}
			if i < len(those) && those[i].GetName() == this.GetName() {
				errs = append(errs, fmt.Errorf(msgNotRunUnique, f.field, this.GetKind(), this.GetName(), strings.ToLower(this.GetKind())))
			}
		}
	}
	if s.Results != nil {
		cluster, known, err := scope(s.childGVK())
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf(msgNotServed, "results.children", s.Results.Children.APIVersion, s.Results.Children.Kind, err))
		case known && cluster:
			out.children = true
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return out, fmt.Errorf("%w:\n  %w", ErrSpec, joinLines(errs))
	}
	return out, nil
}

// objects are a templated field's objects with v.
func (s *Spec) objects(field, text string, v Values) ([]*unstructured.Unstructured, error) {
	out, err := expand(field, text, v)
	if err != nil {
		return nil, err
	}
	objs, err := decodeManifests(out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return objs, nil
}

// mapperScope is the control plane's word on a kind's scope.
func mapperScope(m interface {
	RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error)
}) scopeFunc {
	return func(gvk schema.GroupVersionKind) (bool, bool, error) {
		mp, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return false, false, err
		}
		return mp.Scope.Name() == meta.RESTScopeNameRoot, true, nil
	}
}

// crdScope is the CRD files' word on their kinds' scopes: any other kind
// (a built-in one) is not known. A file it cannot read or decode (a
// kustomization's configuration beside the CRDs) says nothing: testenv
// decides what it installs, and Run asks the control plane anyway.
func crdScope(paths []string) scopeFunc {
	cluster := map[schema.GroupKind]bool{}
	for _, p := range paths {
		files := []string{p}
		if entries, err := os.ReadDir(p); err == nil {
			files = nil
			for _, e := range entries {
				if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			objs, err := decodeManifests(string(data))
			if err != nil {
				continue
			}
			for _, o := range objs {
				if o.GetKind() != "CustomResourceDefinition" {
					continue
				}
				group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
				kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
				sc, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
				cluster[schema.GroupKind{Group: group, Kind: kind}] = sc == "Cluster"
			}
		}
	}
	return func(gvk schema.GroupVersionKind) (bool, bool, error) {
		c, ok := cluster[gvk.GroupKind()]
		return c, ok, nil
	}
}

// noteScope says, once per report, how the experiments treat the world's
// cluster-scoped objects.
func (s scopes) note() string {
	if len(s.fields) == 0 {
		return ""
	}
	return "cluster-scoped: " + strings.Join(s.fields, ", ") + ". No namespace deletion reaches them, so every run deletes its " +
		"cluster-scoped objects still there itself, in the step that deletes the owner namespace, and waits for them as for the namespace; " +
		strings.Join(namespaceOrders, ", ") + ", which test what a namespace deletion does, test for these objects an explicit deletion at that moment instead"
}

// namespaceOrders are the experiments whose deletion is the owner
// namespace's.
var namespaceOrders = []string{OrderAllAtOnce, OrderParentFirst, OrderSecretFirst, OrderForeground, OperatorDown, Escaped}

// reasonClusterChildren is why results-stalled does not apply to
// cluster-scoped children.
const reasonClusterChildren = "results.children's kind is cluster-scoped: results-stalled deletes the children of the owner namespace"

// place puts a world object where it belongs: in the owner namespace, or,
// cluster-scoped, in no namespace, remembered for the deletions and the
// cleanup.
func (r *run) place(o *unstructured.Unstructured) {
	if r.st.scopes.clusterScoped(o) {
		o.SetNamespace("")
		return
	}
	o.SetNamespace(r.ns)
}

// created records an object the run created.
func (r *run) created(o *unstructured.Unstructured) {
	if o.GetNamespace() == "" {
		r.cluster = append(r.cluster, o)
	}
}

// deleteCluster asks for the deletion of the run's cluster-scoped objects
// with the owner namespace's: no namespace deletion reaches them.
func (r *run) deleteCluster(ctx context.Context, opts ...client.DeleteOption) error {
	var names []string
	for _, o := range r.cluster {
		if err := r.st.c.Delete(ctx, o, opts...); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("delete %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		names = append(names, o.GetKind()+" "+o.GetName())
	}
	if len(names) > 0 {
		r.event("cluster-scoped %s deletion asked with the namespace (no namespace deletion reaches them)", strings.Join(names, ", "))
	}
	return nil
}

// clusterLeft lists the run's cluster-scoped objects still there, with
// their finalizers, as leftovers lists a namespace's.
func (r *run) clusterLeft(ctx context.Context) []leftover {
	var out []leftover
	for _, o := range r.cluster {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := r.st.c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			continue // gone, or unreadable: the namespaces' listing skips those too
		}
		l := leftover{Kind: got.GetKind(), Name: got.GetName(), Finalizers: got.GetFinalizers()}
		if ts := got.GetDeletionTimestamp(); ts != nil {
			l.Deleting = time.Since(ts.Time)
		}
		out = append(out, l)
	}
	return out
}

// releaseCluster deletes the run's cluster-scoped objects (the world's
// and operator.manifests') and removes their finalizers, as the cleanup releases what is left in the
// namespaces: the next run starts clean.
func (r *run) releaseCluster(ctx context.Context) error {
	var errs []error
	all := slices.Concat(r.cluster, r.opCluster)
	for _, o := range all {
		if err := r.st.c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", o.GetKind(), o.GetName(), err))
		}
	}
	if _, err := r.stripFinalizers(ctx, all); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

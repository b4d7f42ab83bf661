package capture_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/finale-dev/finale/capture"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/testenv"
)

// prunedGV holds the same Job type under a CRD with a structural schema
// that does not declare status.results: the apiserver drops the field from
// every write, as a user's CRD that forgot it (or a webhook that strips it)
// would. Nothing the release path writes there survives the round trip.
var prunedGV = schema.GroupVersion{Group: "pruned.capture.test.finale.dev", Version: "v1"}

var prunedKind = schema.GroupKind{Group: prunedGV.Group, Kind: "Job"}

func prunedScheme() *runtime.Scheme {
	s := testenv.Scheme()
	s.AddKnownTypes(prunedGV, &Job{}, &JobList{})
	metav1.AddToGroupVersion(s, prunedGV)
	return s
}

func prunedJobCRD() *apiextensionsv1.CustomResourceDefinition {
	open := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "jobs." + prunedGV.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: prunedGV.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "jobs", Kind: "Job", ListKind: "JobList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: prunedGV.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"cancel": {Type: "boolean"}}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"phase": {Type: "string"},
							"nodes": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &open}},
							// no "results": pruned.
						}},
					},
				}},
			}},
		},
	}
}

// TestResultPrunedByTheOwnerSchema: the owner's CRD
// prunes the results map, so a persisted result never survives the round
// trip. The release path must see that on the object its write returned,
// keep the finalizer, say so (a Warning Event, a metric, a watchdog attempt
// naming ErrResultNotKept), back off, and leave its single worker free: a
// child of another owner, cancelled meanwhile, is released. Before the fix
// the release loop re-read, re-wrote and re-read for ever inside one
// reconcile, and the other child stayed Terminating.
func TestResultPrunedByTheOwnerSchema(t *testing.T) {
	sch := prunedScheme()
	c := testenv.Client(t, sch)
	if err := controlplane.InstallCRDs(t.Context(), c, prunedJobCRD()); err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, c)
	st := startStack(t, ns, stackOptions{scheme: sch, ownerKind: prunedKind, workers: 1})

	_, stuckPods := launch(t, c, ns, "stuck", 1, captureFin)
	stuck := stuckPods[0]
	succeed(t, c, stuck, successfulWords)
	deletePod(t, c, stuck)
	err := controlplane.WaitFor(t.Context(), 30*time.Second, "a persist of the stuck child's result", func(context.Context) (bool, error) {
		ops, _, _ := st.writes.snapshot()
		return indexOf(ops, "status stuck") >= 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Another owner's child, its owner cancelled: the rule releases it, if
	// the one worker is free to look.
	other, otherPods := launch(t, c, ns, "other", 1, captureFin)
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"cancel":true}}`))
	if err := c.Patch(t.Context(), other, patch); err != nil {
		t.Fatal(err)
	}
	deletePod(t, c, otherPods[0])
	if err := controlplane.WaitGone(t.Context(), c, otherPods[0], 30*time.Second); err != nil {
		t.Fatalf("the other owner's child was not released while a pruned result was retried (the worker is wedged): %v", err)
	}

	// The stuck child is kept, and why is visible.
	var got corev1.Pod
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(stuck), &got); err != nil || !controllerutil.ContainsFinalizer(&got, captureFin) {
		t.Fatalf("stuck child: want it present with its finalizer, got err=%v finalizers=%v", err, got.Finalizers)
	}
	// The error goes back to the workqueue (its rate limiter backs off,
	// and controller-runtime counts it), not a RequeueAfter that forgets.
	err = controlplane.WaitFor(t.Context(), 30*time.Second, "the result-not-kept Warning, metric, watchdog attempt and reconcile error", func(context.Context) (bool, error) {
		return st.events.count(corev1.EventTypeWarning+" "+capture.EventReasonResultNotKept+" "+stuck.Name) > 0 &&
			errors.Is(st.watchdog.lastError(stuck.Name), capture.ErrResultNotKept) &&
			counterValue(t, capture.MetricResultsNotKept, st.name) > 0 &&
			counterValue(t, "controller_runtime_reconcile_errors_total", st.name) > 0, nil
	})
	if err != nil {
		t.Fatalf("%v (watchdog's last error: %v)", err, st.watchdog.lastError(stuck.Name))
	}
	if s := st.rel.Stats(); s.Releases[capture.ReasonPersisted] != 0 || s.Releases[capture.ReasonOwnerFinished] != 1 {
		t.Errorf("releases = %v, want only the other child's OwnerFinished", s.Releases)
	}

	// One Release call is bounded: exactly one write of the owner, then
	// ErrResultNotKept, well inside the deadline.
	var writes []string
	base := testenv.Client(t, sch)
	w := &countingWriter{Client: base, ops: &writes}
	direct, err := capture.New(base, w, capture.Options[*Job]{
		Name: st.name + "-direct", Finalizer: captureFin, OwnerKind: prunedKind,
		NewOwner: func() *Job { return &Job{} }, Results: jobResults, Writer: jobWriter, Completion: jobCompletion,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := direct.Release(ctx, &got); !errors.Is(err, capture.ErrResultNotKept) {
		t.Fatalf("Release = %v, want ErrResultNotKept", err)
	}
	if len(writes) != 1 || !strings.HasPrefix(writes[0], "status stuck") {
		t.Errorf("writes of one Release = %q, want one status write of the owner", writes)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(stuck), &got); err != nil || !controllerutil.ContainsFinalizer(&got, captureFin) {
		t.Fatalf("stuck child after a direct Release: want it present with its finalizer, got err=%v finalizers=%v", err, got.Finalizers)
	}
}

// countingWriter records the writes a Releaser makes through it.
type countingWriter struct {
	client.Client
	ops *[]string
}

func (w *countingWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	*w.ops = append(*w.ops, "patch "+obj.GetName())
	return w.Client.Patch(ctx, obj, patch, opts...)
}

func (w *countingWriter) Status() client.SubResourceWriter {
	return &countingStatus{SubResourceWriter: w.Client.Status(), ops: w.ops}
}

type countingStatus struct {
	client.SubResourceWriter
	ops *[]string
}

func (s *countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	*s.ops = append(*s.ops, "status "+obj.GetName())
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

// counterValue reads a counter of controller-runtime's registry by name and
// controller label.
func counterValue(t testing.TB, name, controller string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelOf(m, "controller") == controller {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

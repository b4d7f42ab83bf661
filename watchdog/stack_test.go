package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/eventrec"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/watchdog"
)

const (
	group     = "wd.test.finale.dev"
	kind      = "Widget"
	finalizer = group + "/cleanup"
	wait      = 30 * time.Second
)

// widgetCRD is a namespaced kind with a status subresource whose
// status.conditions are metav1.Condition-shaped, as kubebuilder renders them.
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	str := func(extra apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
		extra.Type = "string"
		return extra
	}
	condition := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"type", "status", "lastTransitionTime", "reason", "message"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"type":               str(apiextensionsv1.JSONSchemaProps{MaxLength: ptr.To[int64](316)}),
			"status":             str(apiextensionsv1.JSONSchemaProps{Enum: []apiextensionsv1.JSON{{Raw: []byte(`"True"`)}, {Raw: []byte(`"False"`)}, {Raw: []byte(`"Unknown"`)}}}),
			"observedGeneration": {Type: "integer", Format: "int64", Minimum: ptr.To(0.0)},
			"lastTransitionTime": str(apiextensionsv1.JSONSchemaProps{Format: "date-time"}),
			"reason":             str(apiextensionsv1.JSONSchemaProps{MinLength: ptr.To[int64](1), MaxLength: ptr.To[int64](1024), Pattern: `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`}),
			"message":            str(apiextensionsv1.JSONSchemaProps{MaxLength: ptr.To[int64](32768)}),
		},
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: kind, ListKind: kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"conditions": {
								Type:         "array",
								XListType:    ptr.To("map"),
								XListMapKeys: []string{"type"},
								Items:        &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &condition},
							},
						}},
					},
				}},
			}},
		},
	}
}

// stack is the real control plane, a Widget CRD and a running manager
// whose event recorder the watchdog uses.
type stack struct {
	c   client.Client
	mgr manager.Manager
	ns  string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	cp := testenv.ControlPlane(t)
	sch := testenv.Scheme()
	c := testenv.Client(t, sch)
	if err := controlplane.InstallCRDs(t.Context(), c, widgetCRD()); err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(cp.Config, manager.Options{
		Scheme:                 sch,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return &stack{c: c, mgr: mgr, ns: testenv.Namespace(t, c)}
}

// deletingWidget creates a Widget held by the finalizer, deletes it and
// returns it as read back, with its deletionTimestamp.
func (s *stack) deletingWidget(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	ctx := t.Context()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(group + "/v1")
	u.SetKind(kind)
	u.SetNamespace(s.ns)
	u.SetName(name)
	u.SetFinalizers([]string{finalizer})
	if err := s.c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Delete(ctx, u); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		t.Fatal(err)
	}
	if u.GetDeletionTimestamp() == nil {
		t.Fatalf("%s has no deletionTimestamp after Delete", name)
	}
	return u
}

// release removes the finalizer, as the controller does after cleanup, and
// waits until the object is gone.
func (s *stack) release(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if err := s.c.Patch(t.Context(), u.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(t.Context(), s.c, u, wait); err != nil {
		t.Fatal(err)
	}
}

// condition waits until the object's CleanupBlocked condition has status.
func (s *stack) condition(t *testing.T, u *unstructured.Unstructured, status metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	err := controlplane.WaitFor(t.Context(), wait, fmt.Sprintf("%s condition %s on %s", watchdog.ConditionType, status, u.GetName()), func(ctx context.Context) (bool, error) {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(u.GroupVersionKind())
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
			return false, err
		}
		conds, _, err := unstructured.NestedSlice(cur.Object, "status", "conditions")
		if err != nil {
			return false, err
		}
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] != watchdog.ConditionType || m["status"] != string(status) {
				continue
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &got); err != nil {
				return false, err
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// events lists the events.k8s.io/v1 Events regarding the object with reason.
func (s *stack) events(ctx context.Context, uid types.UID, reason string) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := s.c.List(ctx, &list, client.InNamespace(s.ns)); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.UID == uid && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *stack) waitEvent(t *testing.T, uid types.UID, reason string) []eventsv1.Event {
	t.Helper()
	var got []eventsv1.Event
	err := controlplane.WaitFor(t.Context(), wait, "Event "+reason, func(ctx context.Context) (bool, error) {
		var err error
		got, err = s.events(ctx, uid, reason)
		return len(got) > 0, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func ageSamples(t *testing.T, labels ...string) uint64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "finale_watchdog_deletion_age_at_completion_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels...) {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, kv ...string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if got[kv[i]] != kv[i+1] {
			return false
		}
	}
	return true
}

// TestBlockedDeletionOnRealStack: a Widget held by a finalizer whose
// cleanup keeps timing out (the seed's poisoned client). Many retries and a
// clock past the threshold give exactly one Warning Event in the API and a
// CleanupBlocked=True condition on the object; a successful attempt flips
// the condition to False with a Normal Event; Done records the age.
func TestBlockedDeletionOnRealStack(t *testing.T) {
	s := newStack(t)
	ctx := t.Context()
	u := s.deletingWidget(t, "stuck")
	clk := clocktesting.NewFakeClock(u.GetDeletionTimestamp().Add(time.Second))
	// Count what reaches the manager's recorder: the API view below merges
	// repeats into a series asynchronously, the count is exact.
	rec, err := eventrec.For(s.mgr, "finale-watchdog")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	emitted := map[string]int{} // guarded by mu
	w := watchdog.New(watchdog.Options{
		Clock:     clk,
		Threshold: 5 * time.Minute,
		Recorder: watchdog.RecorderFn(func(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
			mu.Lock()
			emitted[eventtype+" "+reason]++
			mu.Unlock()
			rec.Eventf(regarding, related, eventtype, reason, action, note, args...)
		}),
		Conditions: watchdog.StatusConditions{Reader: s.mgr.GetAPIReader(), Status: s.c},
		Scheme:     s.mgr.GetScheme(),
	})
	timeout := fmt.Errorf("unable to describe worker deployment: %w", context.DeadlineExceeded)

	for i := range 5 {
		if w.Attempt(ctx, u, finalizer, timeout) {
			t.Fatalf("attempt %d blocked within the threshold", i+1)
		}
	}
	clk.Step(5 * time.Minute)
	for i := range 30 {
		if !w.Attempt(ctx, u, finalizer, timeout) {
			t.Fatalf("attempt %d past the threshold not blocked", i+6)
		}
		clk.Step(10 * time.Second)
	}

	cond := s.condition(t, u, metav1.ConditionTrue)
	if cond.Reason != watchdog.ReasonCleanupBlocked {
		t.Errorf("condition reason %q, want %q", cond.Reason, watchdog.ReasonCleanupBlocked)
	}
	for _, want := range []string{finalizer, "5m1s", "6 cleanup attempts", "Transport"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("condition message %q does not name %q", cond.Message, want)
		}
	}
	if cond.ObservedGeneration != u.GetGeneration() {
		t.Errorf("observedGeneration %d, want %d", cond.ObservedGeneration, u.GetGeneration())
	}
	s.waitEvent(t, u.GetUID(), watchdog.ReasonCleanupBlocked)

	if w.Attempt(ctx, u, finalizer, nil) {
		t.Error("successful attempt still blocked")
	}
	if got := s.condition(t, u, metav1.ConditionFalse); got.Reason != watchdog.ReasonCleanupRecovered {
		t.Errorf("recovered condition reason %q, want %q", got.Reason, watchdog.ReasonCleanupRecovered)
	}
	normal := s.waitEvent(t, u.GetUID(), watchdog.ReasonCleanupRecovered)

	mu.Lock()
	got := maps.Clone(emitted)
	mu.Unlock()
	if diff := cmp.Diff(map[string]int{"Warning " + watchdog.ReasonCleanupBlocked: 1, "Normal " + watchdog.ReasonCleanupRecovered: 1}, got); diff != "" {
		t.Errorf("Events emitted (-want +got):\n%s", diff)
	}
	// In the API: one Warning Event object, not turned into a series.
	warnings, err := s.events(ctx, u.GetUID(), watchdog.ReasonCleanupBlocked)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || warnings[0].Type != corev1.EventTypeWarning || warnings[0].Series != nil || warnings[0].DeprecatedCount > 1 {
		t.Errorf("want exactly one Warning %s Event, not repeated; got %+v", watchdog.ReasonCleanupBlocked, warnings)
	}
	if !strings.Contains(warnings[0].Note, finalizer) || !strings.Contains(warnings[0].Note, "Transport") {
		t.Errorf("Warning note %q does not name the finalizer and the class", warnings[0].Note)
	}
	if len(normal) != 1 || normal[0].Type != corev1.EventTypeNormal {
		t.Errorf("want one Normal %s Event, got %+v", watchdog.ReasonCleanupRecovered, normal)
	}

	before := ageSamples(t, "kind", kind, "finalizer", finalizer)
	s.release(t, u)
	w.Done(ctx, u, finalizer)
	if got := ageSamples(t, "kind", kind, "finalizer", finalizer) - before; got != 1 {
		t.Errorf("age-at-completion samples recorded by Done: %d, want 1", got)
	}
	if got := w.Pending(); len(got) != 0 {
		t.Errorf("Pending after Done: %+v", got)
	}
}

// TestRunnableChecksAndSweeps: the caller stops attempting (a wedged
// worker). The Runnable, ticking on the fake clock, promotes the stale
// deletion to blocked (condition True in the API), and sweeps the entry of
// an object that vanished without Done, which is never announced.
func TestRunnableChecksAndSweeps(t *testing.T) {
	s := newStack(t)
	ctx := t.Context()
	stale, vanished := s.deletingWidget(t, "stale"), s.deletingWidget(t, "vanished")
	clk := clocktesting.NewFakeClock(stale.GetDeletionTimestamp().Add(time.Second))
	rec, err := eventrec.For(s.mgr, "finale-watchdog")
	if err != nil {
		t.Fatal(err)
	}
	w := watchdog.New(watchdog.Options{
		Clock:      clk,
		Threshold:  5 * time.Minute,
		Recorder:   rec,
		Conditions: watchdog.StatusConditions{Reader: s.mgr.GetAPIReader(), Status: s.c},
		Scheme:     s.mgr.GetScheme(),
	})
	refused := errors.New("dial tcp 127.0.0.1:7233: connect: connection refused")
	w.Attempt(ctx, stale, finalizer, refused)
	w.Attempt(ctx, vanished, finalizer, refused)
	s.release(t, vanished)

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Runnable(time.Minute, s.mgr.GetAPIReader()).Start(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runnable: %v", err)
		}
	}()
	if err := controlplane.WaitFor(ctx, wait, "the runnable's ticker", func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	}); err != nil {
		t.Fatal(err)
	}
	clk.Step(6 * time.Minute)

	cond := s.condition(t, stale, metav1.ConditionTrue)
	if !strings.Contains(cond.Message, "1 cleanup attempts") {
		t.Errorf("condition message %q: want the one attempt", cond.Message)
	}
	s.waitEvent(t, stale.GetUID(), watchdog.ReasonCleanupBlocked)
	if got, err := s.events(ctx, vanished.GetUID(), watchdog.ReasonCleanupBlocked); err != nil || len(got) != 0 {
		t.Errorf("vanished object announced as blocked: %+v (err %v)", got, err)
	}
	pending := w.Pending()
	if len(pending) != 1 || pending[0].Name != "stale" || !pending[0].Blocked {
		t.Errorf("Pending: want only the blocked stale deletion, got %+v", pending)
	}
}

// TestConditionWriteErrorsOnRealStack: on a kind without status.conditions
// (a ConfigMap) StatusConditions reports an error that is not
// ErrObjectGone, and Attempt still answers; once the object is gone it
// reports ErrObjectGone.
func TestConditionWriteErrorsOnRealStack(t *testing.T) {
	s := newStack(t)
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "held", Finalizers: []string{finalizer}}}
	if err := s.c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatal(err)
	}
	writer := watchdog.StatusConditions{Reader: s.mgr.GetAPIReader(), Status: s.c}
	ref := &metav1.PartialObjectMetadata{ObjectMeta: *cm.ObjectMeta.DeepCopy()}
	ref.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	cond := metav1.Condition{Type: watchdog.ConditionType, Status: metav1.ConditionTrue, Reason: watchdog.ReasonCleanupBlocked, Message: "m", LastTransitionTime: metav1.Now()}
	err := writer.WriteCondition(ctx, ref, cond)
	if err == nil || errors.Is(err, watchdog.ErrObjectGone) {
		t.Errorf("WriteCondition on a ConfigMap: got %v, want a write error that is not ErrObjectGone", err)
	}

	clk := clocktesting.NewFakeClock(cm.DeletionTimestamp.Add(time.Hour))
	w := watchdog.New(watchdog.Options{Clock: clk, Conditions: writer, Scheme: s.mgr.GetScheme()})
	if !w.Attempt(ctx, cm, finalizer, refused()) {
		t.Error("Attempt past the threshold not blocked although the condition could not be written")
	}

	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if err := s.c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WaitGone(ctx, s.c, cm, wait); err != nil {
		t.Fatal(err)
	}
	if err := writer.WriteCondition(ctx, ref, cond); !errors.Is(err, watchdog.ErrObjectGone) {
		t.Errorf("WriteCondition on a gone object: got %v, want ErrObjectGone", err)
	}
}

func refused() error { return errors.New("connect: connection refused") }

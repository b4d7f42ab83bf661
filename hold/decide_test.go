package hold

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	end := t0.Add(DefaultTimeout)
	const recheck = 30 * time.Second
	type in struct {
		o      observation
		policy AccessPolicy
	}
	cases := map[string]struct {
		in   in
		want verdict
	}{
		"alive with dependents keeps the hold": {
			in:   in{o: observation{Dependents: 3}},
			want: verdict{Action: actKeep},
		},
		"alive without dependents drops the hold": {
			in:   in{o: observation{}},
			want: verdict{Action: actDrop},
		},
		"deleting without dependents releases at once": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end}},
			want: verdict{Action: actRelease, Reason: ReleasedDependentsDone},
		},
		"deleting with dependents holds, rechecking": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1}},
			want: verdict{Action: actHold, After: recheck},
		},
		"near the end looks again exactly at the end": {
			in:   in{o: observation{Deleting: true, Now: end.Add(-time.Second), End: end, Dependents: 1}},
			want: verdict{Action: actHold, After: time.Second},
		},
		"at the end releases on timeout": {
			in:   in{o: observation{Deleting: true, Now: end, End: end, Dependents: 1, AccessChecked: true, AccessReady: true}},
			want: verdict{Action: actRelease, Reason: ReleasedTimeout},
		},
		"access not ready keeps holding under RepairDuringHold": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, AccessChecked: true}},
			want: verdict{Action: actHold, After: recheck},
		},
		"access still not ready at the end releases as access_not_ready": {
			in:   in{o: observation{Deleting: true, Now: end.Add(time.Minute), End: end, Dependents: 1, AccessChecked: true}},
			want: verdict{Action: actRelease, Reason: ReleasedAccessNotReady},
		},
		"access not ready releases at once under SkipHold": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, AccessChecked: true}, policy: SkipHold},
			want: verdict{Action: actRelease, Reason: ReleasedAccessNotReady},
		},
		"access ready holds under SkipHold": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, AccessChecked: true, AccessReady: true}, policy: SkipHold},
			want: verdict{Action: actHold, After: recheck},
		},
		"foreground marker gone and owned gone releases": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, OwnedChecked: true}},
			want: verdict{Action: actRelease, Reason: ReleasedOwnedGone},
		},
		"foreground marker gone and owned there holds": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, OwnedChecked: true, OwnedExists: true}},
			want: verdict{Action: actHold, After: recheck},
		},
		"foreground marker present waits for the garbage collector": {
			in:   in{o: observation{Deleting: true, Now: t0, End: end, Dependents: 1, ForegroundMarker: true, OwnedChecked: true}},
			want: verdict{Action: actHold, After: recheck},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := decide(tc.in.o, tc.in.policy, recheck)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWake: a dependent's change wakes its parent at once when it can make
// the parent keep its hold, after dropDelay when it can only let the parent
// go, and not at all when it changes nothing.
func TestWake(t *testing.T) {
	const cleanup = "x/cleanup"
	now := metav1.Now()
	ref := func(o client.Object) string { return o.GetAnnotations()["parent"] }
	dep := func(parent string, mutate ...func(*corev1.ConfigMap)) *corev1.ConfigMap {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "d", Annotations: map[string]string{"parent": parent}, Finalizers: []string{cleanup},
		}}
		for _, m := range mutate {
			m(c)
		}
		return c
	}
	deletingDep := func(c *corev1.ConfigMap) { c.DeletionTimestamp = &now }
	withoutCleanup := func(c *corev1.ConfigMap) { c.Finalizers = nil }
	svc := func(name string, finalizers []string, del bool) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Finalizers: finalizers}}
		if del {
			s.DeletionTimestamp = &now
		}
		return s
	}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	r := fake.NewClientBuilder().WithScheme(s).WithObjects(
		svc("held", []string{Finalizer}, false),
		svc("unheld", nil, false),
		svc("deleting", []string{Finalizer}, true),
	).Build()
	h, err := New(Config{
		Parent: &corev1.Service{}, Scheme: s,
		SecretName: func(client.Object) string { return "" },
		Dependents: []Dependent{{Object: &corev1.ConfigMap{}, ParentName: ref, CleanupFinalizer: cleanup}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wake := h.wake(r, h.dependents[0])
	type ev struct {
		create, del *corev1.ConfigMap
		old, new    *corev1.ConfigMap
	}
	cases := map[string]struct {
		ev   ev
		want []string
	}{
		"new dependent of a held parent":                {ev: ev{create: dep("held")}},
		"new dependent of an unheld parent":             {ev: ev{create: dep("unheld")}, want: []string{"now unheld"}},
		"new dependent of a deleting parent":            {ev: ev{create: dep("deleting")}},
		"new dependent of a parent not in the cache":    {ev: ev{create: dep("absent")}, want: []string{"now absent"}},
		"dependent without a parent":                    {ev: ev{create: dep("")}},
		"status write under a held parent":              {ev: ev{old: dep("held"), new: dep("held")}},
		"status write under a deleting parent":          {ev: ev{old: dep("deleting"), new: dep("deleting")}},
		"deletion starts under a deleting parent":       {ev: ev{old: dep("deleting"), new: dep("deleting", deletingDep)}},
		"deletion starts, cleanup finalizer kept":       {ev: ev{old: dep("held"), new: dep("held", deletingDep)}},
		"cleanup finalizer removed while deleting":      {ev: ev{old: dep("held", deletingDep), new: dep("held", deletingDep, withoutCleanup)}, want: []string{"1s held"}},
		"the same under a deleting parent":              {ev: ev{old: dep("deleting", deletingDep), new: dep("deleting", deletingDep, withoutCleanup)}, want: []string{"1s deleting"}},
		"deletion starts without a cleanup finalizer":   {ev: ev{old: dep("held", withoutCleanup), new: dep("held", withoutCleanup, deletingDep)}, want: []string{"1s held"}},
		"parent reference changed":                      {ev: ev{old: dep("held"), new: dep("unheld")}, want: []string{"now held", "now unheld"}},
		"dependent gone, its last version with cleanup": {ev: ev{del: dep("held", deletingDep)}, want: []string{"1s held"}},
		"dependent gone without a deletion":             {ev: ev{del: dep("held")}, want: []string{"1s held"}},
		"dependent of a deleting parent gone":           {ev: ev{del: dep("deleting", deletingDep)}, want: []string{"1s deleting"}},
		"dependent gone after its cleanup":              {ev: ev{del: dep("held", deletingDep, withoutCleanup)}, want: []string{"1s held"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := &queue{}
			switch {
			case tc.ev.create != nil:
				wake.Create(t.Context(), event.CreateEvent{Object: tc.ev.create}, q)
			case tc.ev.del != nil:
				wake.Delete(t.Context(), event.DeleteEvent{Object: tc.ev.del}, q)
			default:
				wake.Update(t.Context(), event.UpdateEvent{ObjectOld: tc.ev.old, ObjectNew: tc.ev.new}, q)
			}
			got := q.got
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("parents woken (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHoldStart: the hold counts from its first look at a deletion, but
// never from before the deletion nor from later than maxDelay after it.
// Nothing else goes in: no annotation, no stored mark.
func TestHoldStart(t *testing.T) {
	deleted := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const maxDelay = 24 * time.Hour
	cases := map[string]struct {
		firstLook, want time.Time
	}{
		"first look at the deletion":                       {firstLook: deleted, want: deleted},
		"first look after an outage":                       {firstLook: deleted.Add(3 * time.Hour), want: deleted.Add(3 * time.Hour)},
		"first look on a clock behind the API server's":    {firstLook: deleted.Add(-time.Hour), want: deleted},
		"first look exactly maxDelay after the deletion":   {firstLook: deleted.Add(maxDelay), want: deleted.Add(maxDelay)},
		"first look after maxDelay: counted from maxDelay": {firstLook: deleted.Add(maxDelay + time.Hour), want: deleted.Add(maxDelay)},
		"first look in 9999 (a clock gone wrong): clamped": {firstLook: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), want: deleted.Add(maxDelay)},
		"first look in 2000 (a clock gone wrong): clamped": {firstLook: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), want: deleted},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, holdStart(deleted, tc.firstLook, maxDelay)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// queue records how a handler enqueues: "now" or after a delay, then the
// parent's name.
type queue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	got []string
}

func (q *queue) Add(r reconcile.Request) { q.got = append(q.got, "now "+r.Name) }

func (q *queue) AddAfter(r reconcile.Request, d time.Duration) {
	q.got = append(q.got, d.String()+" "+r.Name)
}

package eventrec_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/finale-dev/finale/internal/eventrec"
)

// apiserver is an events sink that refuses creates in the namespaces it
// is told are terminating, as the API server's NamespaceLifecycle
// admission does, and records what it was asked.
type apiserver struct {
	terminating map[string]bool
	calls       []string // "create ns/reason", "patch ns/reason"; "refused ..." for refusals
}

func terminatingErr(ns string) error {
	err := apierrors.NewForbidden(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "e", nil)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Field: "metadata.namespace"}}
	return err
}

func (a *apiserver) Create(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	if a.terminating[ev.Namespace] {
		a.calls = append(a.calls, "refused "+ev.Namespace+"/"+ev.Reason)
		return nil, terminatingErr(ev.Namespace)
	}
	a.calls = append(a.calls, "create "+ev.Namespace+"/"+ev.Reason)
	return ev, nil
}

func (a *apiserver) Update(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	a.calls = append(a.calls, "update "+ev.Namespace+"/"+ev.Reason)
	return ev, nil
}

func (a *apiserver) Patch(_ context.Context, ev *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	a.calls = append(a.calls, "patch "+ev.Namespace+"/"+ev.Reason)
	return ev, nil
}

func namespaces(t *testing.T) client.Reader {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	return fake.NewClientBuilder().WithScheme(s).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "live"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "going", DeletionTimestamp: &now, Finalizers: []string{"kubernetes"}}},
	).Build()
}

func event(ns, reason string) *eventsv1.Event {
	return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x.1"}, Reason: reason,
		Regarding: corev1.ObjectReference{Kind: "Server", Namespace: ns, Name: "pg"}}
}

// An Event lands in its namespace, or, when that is terminating, in the
// fallback namespace if its reason is redirected and nowhere otherwise;
// no create the API server would refuse is sent when the cache knows, and
// a refusal it did not know of is handled the same way and remembered.
func TestSink(t *testing.T) {
	type send struct {
		patch  bool
		ns     string
		reason string
	}
	cases := map[string]struct {
		cache bool     // a Namespaces reader
		sends []send   // in order
		want  []string // what the API server was asked
	}{
		"live namespace: sent there": {
			cache: true,
			sends: []send{{ns: "live", reason: "Deleted"}, {ns: "live", reason: "HoldReleased"}},
			want:  []string{"create live/Deleted", "create live/HoldReleased"},
		},
		"terminating, known from the cache: redirected or dropped, never refused": {
			cache: true,
			sends: []send{{ns: "going", reason: "HoldReleased"}, {ns: "going", reason: "Deleted"}, {patch: true, ns: "going", reason: "HoldReleased"}, {patch: true, ns: "going", reason: "Deleted"}},
			want:  []string{"create ops/HoldReleased", "patch ops/HoldReleased"},
		},
		"terminating, learned from a refusal: then as if known": {
			sends: []send{{ns: "going", reason: "Deleted"}, {ns: "going", reason: "HoldReleased"}, {ns: "going", reason: "Deleted"}},
			want:  []string{"refused going/Deleted", "create ops/HoldReleased"},
		},
		"the cache has not seen the deletion yet: the refusal decides": {
			cache: true,
			sends: []send{{ns: "new", reason: "HoldReleased"}, {ns: "new", reason: "HoldReleased"}},
			want:  []string{"refused new/HoldReleased", "create ops/HoldReleased", "create ops/HoldReleased"},
		},
		"the fallback namespace itself is never diverted": {
			cache: true,
			sends: []send{{ns: "ops", reason: "Deleted"}},
			want:  []string{"create ops/Deleted"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			api := &apiserver{terminating: map[string]bool{"going": true, "new": true}}
			o := eventrec.Options{Fallback: "ops", Redirect: []string{"HoldReleased"}, Clock: clocktesting.NewFakeClock(time.Now())}
			if tc.cache {
				o.Namespaces = namespaces(t)
			}
			s := eventrec.NewSink(api, o)
			for _, e := range tc.sends {
				var err error
				if e.patch {
					_, err = s.Patch(t.Context(), event(e.ns, e.reason), []byte("{}"))
				} else {
					_, err = s.Create(t.Context(), event(e.ns, e.reason))
				}
				if err != nil {
					t.Fatalf("%+v: %v (the broadcaster would log it as an error)", e, err)
				}
			}
			if diff := cmp.Diff(tc.want, api.calls); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
		})
	}
}

// A refusal is remembered for a while, not for ever: a namespace
// re-created under the same name gets its Events again.
func TestSinkForgetsARefusal(t *testing.T) {
	api := &apiserver{terminating: map[string]bool{"going": true}}
	clk := clocktesting.NewFakeClock(time.Now())
	s := eventrec.NewSink(api, eventrec.Options{Clock: clk})
	for range 2 {
		if _, err := s.Create(t.Context(), event("going", "Deleted")); err != nil {
			t.Fatal(err)
		}
	}
	delete(api.terminating, "going")
	clk.Step(10 * time.Minute)
	if _, err := s.Create(t.Context(), event("going", "Deleted")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"refused going/Deleted", "create going/Deleted"}, api.calls); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}

package faultinject_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/testenv"
)

func cm(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func TestScriptedClientFaults(t *testing.T) {
	boom := errors.New("boom")
	for name, tc := range map[string]struct {
		faults []faultinject.Fault
		// creates cm-1..cm-3 in order; want[i] is whether create i errs
		wantErr []bool
		// the objects that exist afterwards
		wantExist []bool
	}{
		"no fault": {
			wantErr:   []bool{false, false, false},
			wantExist: []bool{true, true, true},
		},
		"second create fails and does not land": {
			faults:    []faultinject.Fault{{Verb: faultinject.Create, Kind: "ConfigMap", Nth: 2, Err: boom}},
			wantErr:   []bool{false, true, false},
			wantExist: []bool{true, false, true},
		},
		"other kind is not touched": {
			faults:    []faultinject.Fault{{Verb: faultinject.Create, Kind: "Secret", Err: boom}},
			wantErr:   []bool{false, false, false},
			wantExist: []bool{true, true, true},
		},
		"crash after the first write: it lands, nothing after it does": {
			faults:    []faultinject.Fault{{Verb: faultinject.Create, Nth: 1, Crash: true}},
			wantErr:   []bool{false, true, true},
			wantExist: []bool{true, false, false},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			admin := testenv.Client(t, testenv.Scheme())
			ns := testenv.Namespace(t, admin)
			s := faultinject.NewScript(tc.faults...)
			crashes := 0
			s.OnCrash = func() { crashes++ }
			c := faultinject.WrapClient(admin, s)

			var gotErr, gotExist []bool
			for _, n := range []string{"cm-1", "cm-2", "cm-3"} {
				gotErr = append(gotErr, c.Create(ctx, cm(ns, n)) != nil)
			}
			for _, n := range []string{"cm-1", "cm-2", "cm-3"} {
				err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &corev1.ConfigMap{})
				if err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				gotExist = append(gotExist, err == nil)
			}
			if diff := cmp.Diff(tc.wantErr, gotErr); diff != "" {
				t.Errorf("create errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantExist, gotExist); diff != "" {
				t.Errorf("objects that landed (-want +got):\n%s", diff)
			}
			if want := s.Crashed(); (crashes == 1) != want || crashes > 1 {
				t.Errorf("OnCrash ran %d times, Crashed() = %v", crashes, want)
			}
			if got := s.Writes(); got != 3 {
				t.Errorf("Writes() = %d, want 3 (every attempt is recorded)", got)
			}
		})
	}
}

func TestScriptRecordsVerbsAndStatusWrites(t *testing.T) {
	ctx := t.Context()
	admin := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, admin)
	s := faultinject.NewScript()
	c := faultinject.WrapClient(admin, s)

	obj := cm(ns, "x")
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	obj.Data = map[string]string{"k": "v"}
	if err := c.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, call := range s.Calls() {
		got = append(got, string(call.Verb)+" "+call.Kind)
	}
	want := []string{"create ConfigMap", "get ConfigMap", "update ConfigMap", "list ConfigMap", "delete ConfigMap"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestConflictAndLatency(t *testing.T) {
	ctx := t.Context()
	admin := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, admin)
	s := faultinject.NewScript(
		faultinject.Fault{Verb: faultinject.Update, Err: faultinject.Conflict("configmaps", "x")},
		faultinject.Fault{Verb: faultinject.Get, Latency: time.Hour},
	)
	c := faultinject.WrapClient(admin, s)
	obj := cm(ns, "x")
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, obj); !apierrors.IsConflict(err) {
		t.Fatalf("update: got %v, want a Conflict", err)
	}
	// The latency honours the caller's context: an hour-long fault ends
	// with the caller's deadline, not with the hour.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := c.Get(short, client.ObjectKeyFromObject(obj), obj); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get under latency: got %v, want DeadlineExceeded", err)
	}
}

package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/lifecycle"
)

// eventWrites counts the operator's Event writes the API server refused,
// seen on the wire: whatever recorder the operator uses, its requests go
// through the manager's rest config (wrap).
type eventWrites struct {
	mu      sync.Mutex // guards refused
	refused []string   // "METHOD path: status"
}

func (e *eventWrites) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/events") && resp.StatusCode >= 400 {
			e.mu.Lock()
			e.refused = append(e.refused, fmt.Sprintf("%s %s: %d", req.Method, req.URL.Path, resp.StatusCode))
			e.mu.Unlock()
		}
		return resp, err
	})
}

func (e *eventWrites) Refused() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.refused...)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Deleting a namespace with dependents makes no Event write the API server
// refuses (a terminating namespace refuses new Events; one black-box run
// had 357 refused, each an ERROR line in the operator's log), and the
// Events that matter after the namespace is gone are in the operator's
// namespace, naming their object: the Server's HoldReleased and the
// Database's ReleasedWithoutDelete. Here the Database is
// kept in use past the hold, so the hold times out; the Roles are dropped.
func TestNamespaceDeletionEventsLandOrAreDropped(t *testing.T) {
	writes := &eventWrites{}
	w := startAs(t, controller.Options{HoldTimeout: 3 * time.Second}, func(string) *rest.Config {
		cfg := rest.CopyConfig(testenv.ControlPlane(t).Config)
		cfg.WrapTransport = writes.wrap
		return cfg
	})
	ns := w.server()
	var roles []string
	for i := range 3 {
		r := role(ns, fmt.Sprintf("r%d", i), pgtarget.RandomName("evr_"))
		w.create(r)
		w.ready(r)
		roles = append(roles, r.Spec.RoleName)
	}
	d := database(ns, "d", pgtarget.RandomName("evd_"), "")
	w.create(d)
	w.ready(d)
	session, err := pgxConnectAs(t, w, "finale", w.pg.Password, d.Spec.DatabaseName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = session.Close(context.Background())
		_, _ = w.admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{d.Spec.DatabaseName}.Sanitize())
	})

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := w.c.Delete(t.Context(), nsObj); err != nil {
		t.Fatal(err)
	}
	w.waitGone(nsObj)
	for _, r := range roles {
		w.waitGoneFromPostgres("role", r)
	}
	if _, ok := w.database(d.Spec.DatabaseName); !ok {
		t.Fatal("the database in use was dropped: the hold did not time out and the test proves nothing")
	}

	// What matters is in the operator's namespace, naming its object.
	type seen struct{ Reason, Kind, Namespace, Name string }
	want := []seen{
		{hold.ReasonReleased, "Server", ns, "pg"},
		{hold.ReasonReleasedWithoutDelete, "Database", ns, "d"},
		{lifecycle.ReasonReleased, "ConfigMap", w.recNS, ""}, // on the record
	}
	err = controlplane.WaitFor(t.Context(), wait, "the hold's Events in the operator's namespace", func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := w.c.List(ctx, &evs, client.InNamespace(w.recNS)); err != nil {
			return false, err
		}
		found := map[seen]bool{}
		for _, ev := range evs.Items {
			s := seen{ev.Reason, ev.Regarding.Kind, ev.Regarding.Namespace, ev.Regarding.Name}
			found[s] = true
			if ev.Regarding.Kind == "ConfigMap" {
				s.Name = ""
				found[s] = true
			}
		}
		for _, s := range want {
			if !found[s] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
	// Events the operator tried to send into the terminating namespace
	// (the Roles' Deleted, say) went nowhere, and none was refused.
	if got := writes.Refused(); len(got) > 0 {
		t.Errorf("%d Event writes refused by the API server, want none: %q", len(got), got)
	}
}

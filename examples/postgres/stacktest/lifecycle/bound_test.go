package lifecycle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/lifecycle"
)

// The pool's call timeout bounds each call to the service, not the
// API-server work of a reconcile: with every record write slower than the
// call timeout, a create and a delete still finish through the one client
// they dialled. Found by finale check: lifecycle used to run the whole
// reconcile (live reads, record writes, then the external calls) inside one
// bounded pool.Do, so a slow API server timed the call out, evicted a
// healthy client and could abandon the reconcile between two record writes.
func TestCallTimeoutBoundsExternalCallsOnly(t *testing.T) {
	// Long enough for a real catalog query under make test's load (four
	// jobs on two cores), short against the record writes' latency.
	const callTimeout = 2 * time.Second
	// Every record write (create, update, delete of a ConfigMap) takes
	// longer than the call timeout: a loaded API server.
	slow := faultinject.NewScript(
		faultinject.Fault{Verb: faultinject.Create, Kind: "ConfigMap", Latency: 2 * callTimeout},
		faultinject.Fault{Verb: faultinject.Update, Kind: "ConfigMap", Latency: 2 * callTimeout},
		faultinject.Fault{Verb: faultinject.Delete, Kind: "ConfigMap", Latency: 2 * callTimeout},
	)
	e := newEnv(t, nil)
	e.store = mustStore(t, faultinject.WrapClient(e.c, slow), e.store.Namespace())
	e.led = ledgerOn(e.store)
	var dials atomic.Int32
	pool, err := clientpool.New(clientpool.Options[string, *pgtarget.Target]{
		Name: "bound-" + e.ns,
		Dial: clientpool.DialFn[string, *pgtarget.Target](func(ctx context.Context, dsn string) (*pgtarget.Target, error) {
			dials.Add(1)
			return pgtarget.Open(ctx, dsn)
		}),
		Close:       clientpool.CloseFn[*pgtarget.Target](func(t *pgtarget.Target) error { t.Close(); return nil }),
		CallTimeout: callTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	e.pool = pool
	w := e.widget("a", "")
	r := e.reconciler(nil, lifecycle.Options{Ledger: e.led})

	reconcileOnce(t, r, w)
	uid := e.get(w).UID
	if !e.roleExists(w.Spec.RoleName) || e.record(uid) == nil {
		t.Fatalf("after the create: role exists %v, record exists %v; want both", e.roleExists(w.Spec.RoleName), e.record(uid) != nil)
	}
	if err := e.c.Delete(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, w)
	if e.roleExists(w.Spec.RoleName) {
		t.Error("role still exists after the deletion")
	}
	if err := waitGone(t, e, w); err != nil {
		t.Error(err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d dials for one create and one delete through a healthy server: the slow API server's time was charged to the service's calls and evicted its client", n)
	}
}

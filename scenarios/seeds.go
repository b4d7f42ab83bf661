package scenarios

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
)

// poisonedBound is how long the poisoned-client deletion may take: ten
// call timeouts. The seed's deletion retried for 39 minutes.
const poisonedBound = 10 * callTimeout

// checkEnd checks no-leak and no-wrong-delete for the world's scope, then
// tidies what the run left in PostgreSQL (a naive run's leaks, the seeded
// untagged objects) so later runs start clean.
func (w *world) checkEnd(ctx context.Context, r *Result, u Untagged) error {
	rec := w.recNS
	if w.naive {
		rec = ""
	}
	vs, err := CheckNoLeak(ctx, w.db, w.c, rec, w.scope())
	if err != nil {
		return err
	}
	r.add(vs...)
	vs, err = CheckNoWrongDelete(ctx, w.db, u)
	if err != nil {
		return err
	}
	r.add(vs...)
	if w.naive {
		if err := dropTagged(ctx, w.db, Scope{NamePrefix: w.prefix}); err != nil {
			return err
		}
	}
	return u.Drop(ctx, w.db)
}

// release removes every finalizer from the run's objects in ns, so that a
// naive run that got stuck does not hold its namespace (or feed the next
// operator) forever.
func (w *world) release(ctx context.Context, ns string) error {
	return check.Release(ctx, w.env.ControlPlane.Config, ns)
}

// runPoisoned is G1: the operator's established connection goes silent
// (frozen: accepted, never answered, never closed) while a fresh dial would
// work, and a Role is deleted. The guarded pool's call timeout classifies
// the hang as Transport, evicts and redials; the naive pool reuses the
// poisoned connection and the deletion never finishes while it stays so.
func runPoisoned(ctx context.Context, env Env, out io.Writer, naive bool) (Result, error) {
	var r Result
	w, u, err := seedWorld(ctx, env, naive)
	if err != nil {
		return r, err
	}
	defer w.close()
	ns, err := w.namespace(ctx, "poisoned-")
	if err != nil {
		return r, err
	}
	if err := w.server(ctx, ns); err != nil {
		return r, err
	}
	role := w.role(ns, "r")
	if err := w.create(ctx, role); err != nil {
		return r, err
	}
	if err := w.waitReady(ctx, readyTimeout, role); err != nil {
		return r, err
	}
	n := w.proxy.Freeze()
	if n == 0 {
		return r, fmt.Errorf("poisoned-client: no established operator connection to freeze; the scenario would prove nothing")
	}
	r.fault(FaultProxyFreeze)
	say(out, "froze %d established connection(s); new dials still work; deleting Role %s/%s", n, ns, role.Name)
	accepted := w.proxy.Accepted()
	if err := w.c.Delete(ctx, role); err != nil {
		return r, err
	}
	vs, err := CheckFinished(ctx, w.c, poisonedBound, role)
	if err != nil {
		return r, err
	}
	r.add(vs...)
	r.note("deletion with the established connection frozen: finished=%v within %s; new connections dialled: %d", len(vs) == 0, poisonedBound, w.proxy.Accepted()-accepted)
	say(out, "deletion finished within %s: %v", poisonedBound, len(vs) == 0)
	w.proxy.Thaw()
	if naive {
		// Healed, the naive build may finish; either way the run tidies up.
		if _, err := CheckFinished(ctx, w.c, env.bound(), role); err != nil {
			return r, err
		}
		if err := w.release(ctx, ns); err != nil {
			return r, err
		}
	}
	if err := w.checkEnd(ctx, &r, u); err != nil {
		return r, err
	}
	w.stop()
	if err := w.deleteNamespace(ctx, ns); err != nil {
		return r, err
	}
	return r, w.release(ctx, ns)
}

// Namespace deletion orders.
const (
	OrderNamespace    = "namespace"
	OrderSecretFirst  = "secret-first"
	OrderServerFirst  = "server-first"
	OrderOperatorDown = "operator-down"
)

// Orders lists the namespace-deletion orders the G2 scenario runs.
func Orders() []string {
	return []string{OrderNamespace, OrderSecretFirst, OrderServerFirst, OrderOperatorDown}
}

// runNamespaceDeletion is G2: a namespace holding a Server, its Secret,
// Roles and a Database is deleted in each order (all at once; the Secret
// first; the Server first; with the operator down). With records and the
// hold, every tagged object is dropped or recorded and the namespace goes;
// the naive build releases dependents whose Server or Secret went first, and
// their roles and databases stay in PostgreSQL with no owner and no record.
func runNamespaceDeletion(ctx context.Context, env Env, out io.Writer, naive bool) (Result, error) {
	var r Result
	w, u, err := seedWorld(ctx, env, naive)
	if err != nil {
		return r, err
	}
	defer w.close()
	for _, order := range Orders() {
		before := len(r.Violations)
		if err := w.namespaceOrder(ctx, env, out, order, &r); err != nil {
			return r, fmt.Errorf("order %s: %w", order, err)
		}
		// Leaks are checked per order so each order's verdict is visible.
		if err := w.checkEnd(ctx, &r, Untagged{}); err != nil {
			return r, err
		}
		r.Runs++
		r.note("order %-13s violations: %d", order, len(r.Violations)-before)
		say(out, "order %s: %d violation(s)", order, len(r.Violations)-before)
	}
	vs, err := CheckNoWrongDelete(ctx, w.db, u)
	if err != nil {
		return r, err
	}
	r.add(vs...)
	return r, u.Drop(ctx, w.db)
}

func (w *world) namespaceOrder(ctx context.Context, env Env, out io.Writer, order string, r *Result) error {
	ns, err := w.namespace(ctx, "nsdel-")
	if err != nil {
		return err
	}
	if err := w.server(ctx, ns); err != nil {
		return err
	}
	objs := []client.Object{w.role(ns, "r0"), w.role(ns, "r1"), w.database(ns, "d0")}
	for _, o := range objs {
		if err := w.create(ctx, o); err != nil {
			return err
		}
	}
	if err := w.waitReady(ctx, readyTimeout, objs...); err != nil {
		return err
	}
	say(out, "namespace %s ready (Server, Secret, 2 Roles, 1 Database); order %s", ns, order)
	srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: serverName}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	switch order {
	case OrderSecretFirst:
		if err := w.c.Delete(ctx, sec); err != nil {
			return err
		}
		r.fault(FaultSecretDelete)
		if err := w.waitDeletingOrGone(ctx, sec); err != nil {
			return err
		}
		fallthrough
	case OrderServerFirst:
		if err := w.c.Delete(ctx, srv); err != nil {
			return err
		}
		r.fault(FaultServerDelete)
		if err := w.waitDeletingOrGone(ctx, srv); err != nil {
			return err
		}
		if w.naive {
			// Nothing holds the naive Server: it is gone before the
			// namespace deletion starts, as the seed's control plane was.
			if err := controlplane.WaitGone(ctx, w.c, srv, env.bound()); err != nil {
				return err
			}
		}
	case OrderOperatorDown:
		w.stop()
		r.fault(FaultOperatorDown)
	}
	if err := w.deleteNamespace(ctx, ns); err != nil {
		return err
	}
	r.fault(FaultNSDelete)
	if order == OrderOperatorDown {
		// Let the namespace controller do everything it can without the
		// operator before it comes back.
		err := controlplane.WaitFor(ctx, env.bound(), "namespace "+ns+" terminating with its Server deleting or gone", func(ctx context.Context) (bool, error) {
			err := w.c.Get(ctx, client.ObjectKeyFromObject(srv), srv)
			if client.IgnoreNotFound(err) != nil {
				return false, err
			}
			return err != nil || srv.DeletionTimestamp != nil, nil
		})
		if err != nil {
			return err
		}
		if err := w.start(ctx, nil); err != nil {
			return err
		}
		r.fault(FaultRestart)
	}
	vs, err := CheckFinished(ctx, w.c, env.bound(), nsObj)
	if err != nil {
		return err
	}
	r.add(vs...)
	if len(vs) > 0 {
		return w.release(ctx, ns)
	}
	return nil
}

func (w *world) waitDeletingOrGone(ctx context.Context, o client.Object) error {
	return controlplane.WaitFor(ctx, w.env.bound(), fmt.Sprintf("%s deleting", o.GetName()), func(ctx context.Context) (bool, error) {
		err := w.c.Get(ctx, client.ObjectKeyFromObject(o), o)
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		return err != nil || o.GetDeletionTimestamp() != nil, nil
	})
}

// seedWorld is a G1 or G2 seed's start: a world with planted untagged
// objects (the no-wrong-delete check's) and the operator running.
func seedWorld(ctx context.Context, env Env, naive bool) (*world, Untagged, error) {
	w, err := newWorld(ctx, env, naive)
	if err != nil {
		return nil, Untagged{}, err
	}
	u, err := SeedUntagged(ctx, w.db, w.prefix, 2)
	if err == nil {
		err = w.start(ctx, nil)
	}
	if err != nil {
		w.close()
		return nil, Untagged{}, err
	}
	return w, u, nil
}

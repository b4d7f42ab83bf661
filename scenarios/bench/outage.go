package bench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/scenarios/internal/operator"
)

// Outage is the result of RunOutage: what n dependents of a Server that is
// down cost over a window, with the default retry spacing and with the
// fixed two-second retry finale had before (the baseline).
type Outage struct {
	Dependents int
	Window     time.Duration
	// Attempts are TCP connections the operator opened to the dead
	// server (the Server controller's: dependents wait on the Server's
	// Ready condition and dial nothing); Reconciles are the Role
	// controller's passes; Writes are its API writes (Roles, records,
	// Events excluded).
	Attempts, AttemptsBaseline     int64
	Reconciles, ReconcilesBaseline int64
	Writes, WritesBaseline         int
}

// fixedRetry is the baseline: every failure, of a Role or of the Server,
// retried two seconds later.
func fixedRetry() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemFastSlowRateLimiter[reconcile.Request](2*time.Second, 2*time.Second, 0)
}

// RunOutage points a Server at a port that accepts and drops every
// connection (a server that is down behind a load balancer), creates n
// Roles referencing it, and counts connection attempts and API writes for
// window, once with lifecycle's default retry spacing and once with the
// baseline.
func RunOutage(ctx context.Context, s Stack, n int, window time.Duration) (Outage, error) {
	if n <= 0 || window <= 0 {
		return Outage{}, fmt.Errorf("bench: %d Roles for %s: give at least one Role and a positive window", n, window)
	}
	res := Outage{Dependents: n, Window: window}
	for _, baseline := range []bool{false, true} {
		attempts, reconciles, writes, err := outageRun(ctx, s, n, window, baseline)
		if err != nil {
			return res, err
		}
		if baseline {
			res.AttemptsBaseline, res.ReconcilesBaseline, res.WritesBaseline = attempts, reconciles, writes
		} else {
			res.Attempts, res.Reconciles, res.Writes = attempts, reconciles, writes
		}
	}
	return res, nil
}

func outageRun(ctx context.Context, s Stack, n int, window time.Duration, baseline bool) (attempts, reconciles int64, writes int, err error) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = dead.Close() }() // ends the accept loop; nothing to report
	var dials, passes atomic.Int64
	go func() {
		for {
			c, err := dead.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			_ = c.Close()
		}
	}()
	env, err := s.setup(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	defer env.close()
	var srv v1alpha1.Server
	if err := env.c.Get(ctx, clientKey(env.ns, "pg"), &srv); err != nil {
		return 0, 0, 0, err
	}
	_, port, _ := net.SplitHostPort(dead.Addr().String())
	p, _ := strconv.Atoi(port)
	srv.Spec.Host, srv.Spec.Port = "127.0.0.1", int32(p)
	if err := env.c.Update(ctx, &srv); err != nil {
		return 0, 0, 0, err
	}
	script := faultinject.NewScript()
	o := controller.Options{RecordsNamespace: env.recNS, PoolName: "bench-" + env.recNS,
		WrapReconciler: func(name string, r reconcile.Reconciler) reconcile.Reconciler {
			if name != controller.ControllerRole {
				return r
			}
			return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				passes.Add(1)
				return r.Reconcile(ctx, req)
			})
		}}
	if baseline {
		o.RateLimiter, o.ServerRateLimiter = fixedRetry(), fixedRetry()
	}
	op, err := operator.Start(ctx, operator.Options{Config: s.Config, Scheme: env.scheme, Script: script, Operator: o})
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = op.Stop() }() // the run's figures are what it returns
	if err := op.WaitForCacheSync(ctx); err != nil {
		return 0, 0, 0, err
	}
	s.logf("outage: %d Roles on a dead server for %s, %s", n, window, map[bool]string{false: "default retry spacing", true: "fixed 2 s retries (baseline)"}[baseline])
	before, from, fromPasses := len(script.Calls()), dials.Load(), passes.Load()
	if err := env.createRoles(ctx, n); err != nil {
		return 0, 0, 0, err
	}
	t := time.NewTimer(window)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return 0, 0, 0, ctx.Err()
	case <-t.C:
	}
	attempts, reconciles, writes = dials.Load()-from, passes.Load()-fromPasses, lifecycleWrites(script.Calls()[before:])
	// The counts end with the window. The Roles go after it, and the
	// hold's Server and Secret with them, before the operator stops.
	if err := env.deleteAllRoles(ctx, op.Cache); err != nil {
		return 0, 0, 0, err
	}
	return attempts, reconciles, writes, env.unheld(ctx)
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

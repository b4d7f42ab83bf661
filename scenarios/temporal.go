package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.temporal.io/api/serviceerror"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/temporal/stack"
	"github.com/finale-dev/finale/internal/temporalbin"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/watchdog"
)

// TemporalServer is a Temporal frontend and a namespace on it, for the
// temporal-* scenarios.
type TemporalServer struct {
	HostPort, Namespace string
}

// temporalBound is how long the temporal-poisoned-client deletion may take
// after the poisoning: ten call timeouts, as for poisoned-client.
const temporalBound = 10 * stack.DefaultCallTimeout

// runTemporalPoisoned is G1 on the seed's own stack: the example Temporal
// operator (examples/temporal) with the real SDK against a real Temporal
// server. A WorkerDeployment's Connection exists before its API-key Secret
// (no client dialled), the Secret appears (one client dialled and cached,
// the server-side deployment created and given a version by a real
// worker), the cached client is stalled (keepalive answered, calls never)
// and the object is deleted. Guarded: the first timed-out call evicts, the
// deletion finishes and the server-side deployment is gone. Naive
// (temporal-worker-controller v1.7's pool): still stuck after ten minutes
// on the stepped clock, CleanupBlocked, and once the run strips its
// finalizer, the server-side deployment is left behind.
func runTemporalPoisoned(ctx context.Context, env Env, out io.Writer, naive bool) (Result, error) {
	var r Result
	ts := env.Temporal
	if ts.HostPort == "" {
		say(out, "starting a Temporal server (built once into the cache; a cold build takes about 9 minutes)")
		srv, err := temporalbin.Start(ctx, temporalbin.Options{Log: out})
		if err != nil {
			return r, err
		}
		defer func() { _ = srv.Stop() }()
		ts = TemporalServer{HostPort: srv.HostPort, Namespace: srv.Namespace}
	}
	s, err := stack.Start(ctx, stack.Options{Config: env.ControlPlane.Config, HostPort: ts.HostPort, Namespace: ts.Namespace, Naive: naive})
	if err != nil {
		return r, err
	}
	defer func() { _ = s.Stop() }()
	ns, err := s.Namespace(ctx, "temporal-poisoned-")
	if err != nil {
		return r, err
	}
	if err := s.Connection(ctx, ns); err != nil {
		return r, err
	}
	w, err := s.WorkerDeployment(ctx, ns, "app")
	if err != nil {
		return r, err
	}
	if _, err := s.WaitCondition(ctx, w, lifecycle.ConditionSynced, metav1.ConditionFalse, "APIKeySecretMissing"); err != nil {
		return r, err
	}
	say(out, "step 1: Connection without its API-key Secret: Synced=False APIKeySecretMissing, %d client(s) dialled, %d cached", s.Op.Dials(), s.Op.Pool.Len())
	r.note("step 1 (no Secret): clients dialled %d, cached %d", s.Op.Dials(), s.Op.Pool.Len())
	if err := s.APIKeySecret(ctx, ns); err != nil {
		return r, err
	}
	if _, err := s.WaitCondition(ctx, w, lifecycle.ConditionReady, metav1.ConditionTrue, lifecycle.ReasonAvailable); err != nil {
		return r, err
	}
	if err := s.AddVersion(ctx, w.Spec.DeploymentName, "v1"); err != nil {
		return r, err
	}
	say(out, "step 2: the Secret appeared: %d client dialled and cached; deployment %s created, claimed, version v1 registered by a real worker", s.Op.Dials(), w.Spec.DeploymentName)
	n, err := s.Poison()
	if err != nil {
		return r, err
	}
	if n == 0 {
		return r, errors.New("temporal-poisoned-client: no established operator connection to stall; the scenario would prove nothing")
	}
	r.fault(FaultProxyStall)
	dials := s.Op.Dials()
	say(out, "step 3: stalled %d established connection(s): PINGs answered, calls never; new connections work", n)
	t0 := time.Now()
	if err := s.C.Delete(ctx, w); err != nil {
		return r, err
	}
	say(out, "step 4: WorkerDeployment %s/%s deleted", ns, w.Name)
	vs, err := CheckFinished(ctx, s.C, temporalBound, w)
	if err != nil {
		return r, err
	}
	r.add(vs...)
	if len(vs) == 0 {
		r.note("deletion finished %s after the poisoning; redials %d", time.Since(t0).Round(100*time.Millisecond), s.Op.Dials()-dials)
		say(out, "deletion finished in %s, through %d new client(s)", time.Since(t0).Round(100*time.Millisecond), s.Op.Dials()-dials)
	} else {
		// Ten minutes of retries, most of them on the stepped clock.
		if err := s.AgeDeletion(ctx, w, 10*time.Minute); err != nil {
			return r, err
		}
		c, err := s.WaitCondition(ctx, w, watchdog.ConditionType, metav1.ConditionTrue, watchdog.ReasonCleanupBlocked)
		if err != nil {
			return r, err
		}
		events, err := s.WarningEvents(ctx, w, watchdog.ReasonCleanupBlocked)
		if err != nil {
			return r, err
		}
		r.note("still stuck after 10m on the operator's clock: %s=%s (%s), %d Warning Event(s), %d attempts, redials %d", c.Type, c.Status, c.Message, events, s.Attempts(w), s.Op.Dials()-dials)
		say(out, "still deleting after 10m: CleanupBlocked=True, %d attempts on the same poisoned client", s.Attempts(w))
		if err := s.Release(ctx, w); err != nil {
			return r, err
		}
		if err := controlplane.WaitGone(ctx, s.C, w, env.bound()); err != nil {
			return r, err
		}
	}
	// The object is gone either way now: its server-side deployment must
	// be too. The naive run's stays on the throwaway server, under a name
	// no other run uses.
	_, err = s.Describe(ctx, w.Spec.DeploymentName)
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
	case err != nil:
		return r, fmt.Errorf("describe %s after the deletion: %w", w.Spec.DeploymentName, err)
	default:
		r.add(Violation{NoLeak, fmt.Sprintf("worker deployment %s is still on the Temporal server, its WorkerDeployment gone", w.Spec.DeploymentName)})
	}
	if err := s.C.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return r, err
	}
	return r, nil
}

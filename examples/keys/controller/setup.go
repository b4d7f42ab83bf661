package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/eventrec"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
	"github.com/finale-dev/finale/sweep"
	"github.com/finale-dev/finale/watchdog"
)

// Finalizer is the APIKeys' cleanup finalizer.
const Finalizer = "keys.finale.dev/cleanup"

// DefaultCallTimeout is Options.CallTimeout when unset.
const DefaultCallTimeout = 10 * time.Second

// Options configure Setup. The zero value is usable in a pod (the records
// namespace is $POD_NAMESPACE).
type Options struct {
	// RecordsNamespace holds the cleanup records and the operator key;
	// "" is $POD_NAMESPACE. KeyServers there are the sweeper's: an admin
	// designates a KeyServer for sweeping by creating it there, where
	// tenants cannot.
	RecordsNamespace string
	// KeySecret names the operator key's Secret in the records namespace;
	// "" is ledger.KeySecretName. Created on first start.
	KeySecret string
	// Clock is injected everywhere time decides; nil is the real clock.
	Clock clock.Clock
	// HoldTimeout bounds a KeyServer's hold; zero is hold.DefaultTimeout.
	HoldTimeout time.Duration
	// RetryInterval is how soon an APIKey that needs the user is looked
	// at again; zero is lifecycle.DefaultRetryInterval.
	RetryInterval time.Duration
	// CallTimeout bounds each call to a key service; a call over it is a
	// Transport error and evicts its client. Zero is DefaultCallTimeout.
	CallTimeout time.Duration
	// SweepSettle, SweepClockSkew and SweepInterval tune the sweeper; zero
	// is sweep's default.
	SweepSettle, SweepClockSkew, SweepInterval time.Duration
	// Workers bounds concurrent APIKey reconciles; zero is
	// lifecycle.DefaultWorkers.
	Workers int
	// SkipNameValidation lets several managers run in one process (tests).
	SkipNameValidation bool
}

// Operator is what Setup wired.
type Operator struct {
	Pool     *Pool
	Ledger   *ledger.Ledger
	Hold     *hold.Hold
	Watchdog *watchdog.Watchdog
	Sweeper  *sweep.Sweeper
	APIKeys  *lifecycle.Reconciler[*v1alpha1.APIKey, Key, *keyclient.Client]
}

// Setup registers the APIKey controller with mgr, with everything finale's
// guarantees need: the pool, the ledger (its key read, or created, live
// in the records namespace before the manager starts), the hold on
// KeyServers and their Secrets, the watchdog and the sweeper.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) (*Operator, error) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	scheme, live := mgr.GetScheme(), mgr.GetAPIReader()
	recorder, err := eventrec.For(mgr, "finale-keys")
	if err != nil {
		return nil, err
	}
	pool, err := clientpool.New(clientpool.Options[Key, *keyclient.Client]{
		Name: "keys", Dial: dial(live), CallTimeout: o.CallTimeout, IdleTimeout: 10 * time.Minute, Clock: o.Clock,
		Close: clientpool.CloseFn[*keyclient.Client](func(c *keyclient.Client) error { return c.Close() }),
	})
	if err != nil {
		return nil, err
	}
	op := &Operator{Pool: pool}
	rw := ledger.ReadWriter{Reader: live, Writer: mgr.GetClient()}
	store, err := ledger.NewConfigMapStore(rw, o.RecordsNamespace)
	if err != nil {
		return nil, err
	}
	key, err := ledger.LoadKey(ctx, rw, store.Namespace(), o.KeySecret)
	if err != nil {
		return nil, err
	}
	if op.Ledger, err = ledger.New(store, ledger.Options{Key: key, Clock: o.Clock}); err != nil {
		return nil, err
	}
	servers := keyServers{r: mgr.GetCache()}
	if op.Hold, err = hold.New(hold.Config{
		Parent: &v1alpha1.KeyServer{}, Scheme: scheme, Clock: o.Clock, Timeout: o.HoldTimeout, Recorder: recorder,
		SecretName: func(p client.Object) string { return p.(*v1alpha1.KeyServer).Spec.TokenSecretRef.Name },
		Dependents: []hold.Dependent{{Object: &v1alpha1.APIKey{}, CleanupFinalizer: Finalizer,
			ParentName: func(o client.Object) string { return o.(*v1alpha1.APIKey).Spec.KeyServerRef.Name }}},
		// Access is checked on every pass of a held KeyServer, so a token
		// fixed late still lets its APIKeys delete.
		Access: hold.AccessFn(func(ctx context.Context, p client.Object) (bool, error) {
			k, err := servers.key(ctx, p.(*v1alpha1.KeyServer))
			if err == nil {
				err = pool.Do(ctx, k, func(ctx context.Context, c *keyclient.Client) error { _, err := c.Identity(ctx); return err })
			}
			return err == nil, err
		}),
	}); err != nil {
		return nil, err
	}
	op.Watchdog = watchdog.New(watchdog.Options{Clock: o.Clock, Recorder: recorder, Scheme: scheme,
		Conditions: watchdog.StatusConditions{Reader: live, Status: mgr.GetClient()}})
	if err := mgr.Add(op.Watchdog.Runnable(watchdog.DefaultCheckInterval, live)); err != nil {
		return nil, err
	}
	if op.APIKeys, err = lifecycle.New(mgr.GetClient(), func() *v1alpha1.APIKey { return &v1alpha1.APIKey{} }, adapter{servers}, pool,
		lifecycle.Options{
			Finalizer: Finalizer, Scheme: scheme, Ledger: op.Ledger, Hold: op.Hold, Watchdog: op.Watchdog,
			Recorder: recorder, Clock: o.Clock, RetryInterval: o.RetryInterval, APIReader: live,
		}); err != nil {
		return nil, err
	}
	if err := op.APIKeys.SetupWithManager(mgr, lifecycle.SetupOptions{Name: "apikey", Workers: o.Workers, SkipNameValidation: o.SkipNameValidation}); err != nil {
		return nil, err
	}
	targets, err := op.APIKeys.SweepTargets(designated(mgr.GetClient(), store.Namespace()))
	if err != nil {
		return nil, err
	}
	if op.Sweeper, err = sweep.New(sweep.Options{
		Ledger: op.Ledger, Owners: mgr.GetClient(), Live: live, Targets: sweep.ByKind{"APIKey": targets},
		Recorder: recorder, Clock: o.Clock, Settle: o.SweepSettle, MaxClockSkew: o.SweepClockSkew, Interval: o.SweepInterval,
	}); err != nil {
		return nil, err
	}
	if err := mgr.Add(op.Sweeper); err != nil {
		return nil, err
	}
	return op, nil
}

// designated lists the KeyServers of the records namespace, where tenants
// cannot create any: the sweeper uses those, and the KeyServer a record
// was created through while it still exists; never a tenant's other
// KeyServers, which could point at a copy of the service.
func designated(r client.Reader, namespace string) lifecycle.Designated {
	return func(ctx context.Context) ([]client.Object, error) {
		var list v1alpha1.KeyServerList
		if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return nil, fmt.Errorf("list KeyServers in %s for the sweeper: %w", namespace, err)
		}
		out := make([]client.Object, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		return out, nil
	}
}

package controller

import (
	"context"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/examples/keys/service"
	"github.com/finale-dev/finale/hold"
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
	// tenants cannot (lifecycle.Kind.Designated's default); the sweeper
	// never uses a tenant's other KeyServers, which could point at a copy
	// of the service.
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
	// BlockedAfter is how long a deletion may fail before it is reported
	// blocked (the CleanupBlocked condition and a Warning Event); zero is
	// watchdog.DefaultThreshold.
	BlockedAfter time.Duration
	// SweepSettle, SweepClockSkew and SweepInterval tune the sweeper; zero
	// is sweep's default.
	SweepSettle, SweepClockSkew, SweepInterval time.Duration
	// Workers bounds concurrent APIKey reconciles; zero is
	// lifecycle.DefaultWorkers.
	Workers int
	// SkipNameValidation lets several managers run in one process (tests).
	SkipNameValidation bool
	// ServiceMode is the API shape of the key services this operator
	// manages keys in; "" is service.ModeChallenge, the one finale's
	// guarantees are proven on. service.ModeIDOnly (the G2 seed's shape)
	// proves nothing and deletes by ID after a read: the owner's own
	// cleanup still works, the sweeper never acts, and a copy of the
	// service is taken for it (README.md's table).
	ServiceMode service.Mode
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
// guarantees need (lifecycle.Setup): the pool, the ledger (its key read,
// or created, live in the records namespace before the manager starts),
// the hold on KeyServers and their Secrets, the watchdog and the sweeper.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) (*Operator, error) {
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	servers := keyServers{r: mgr.GetCache()}
	a, err := o.adapter(ctx, mgr, adapter{servers})
	if err != nil {
		return nil, err
	}
	parts, err := lifecycle.Setup(ctx, mgr, lifecycle.Kind[*v1alpha1.APIKey, *v1alpha1.KeyServer, Key, *keyclient.Client]{
		Adapter:    a,
		Dial:       dial(mgr.GetAPIReader()),
		ParentName: func(k *v1alpha1.APIKey) string { return k.Spec.KeyServerRef.Name },
		SecretName: func(s *v1alpha1.KeyServer) string { return s.Spec.TokenSecretRef.Name },
		Options:    lifecycle.Options{Finalizer: Finalizer, RetryInterval: o.RetryInterval},
		Controller: lifecycle.SetupOptions{Name: "apikey", Workers: o.Workers, SkipNameValidation: o.SkipNameValidation},
		// The rest is tuning; the zero value of each is a sound default.
		PoolOptions: clientpool.Options[Key, *keyclient.Client]{Name: "keys", CallTimeout: o.CallTimeout},
		Clock:       o.Clock, RecordsNamespace: o.RecordsNamespace, KeySecret: o.KeySecret, EventSource: "finale-keys",
		HoldOptions:     hold.Config{Timeout: o.HoldTimeout},
		WatchdogOptions: watchdog.Options{Threshold: o.BlockedAfter},
		SweepOptions:    sweep.Options{Settle: o.SweepSettle, MaxClockSkew: o.SweepClockSkew, Interval: o.SweepInterval},
	})
	if err != nil {
		return nil, err
	}
	apiKeys, _ := parts.Reconcilers["APIKey"].(*lifecycle.Reconciler[*v1alpha1.APIKey, Key, *keyclient.Client])
	return &Operator{Pool: parts.Pool, Ledger: parts.Ledger, Hold: parts.Hold, Watchdog: parts.Watchdog, Sweeper: parts.Sweeper, APIKeys: apiKeys}, nil
}

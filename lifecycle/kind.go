package lifecycle

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
	"github.com/finale-dev/finale/watchdog"
)

// Defaults of the pool Setup builds.
const (
	// DefaultCallTimeout bounds each call when Kind.PoolOptions.CallTimeout
	// is zero: an unbounded call to a client that stopped answering never
	// fails, so it is never evicted (the seed incident of G1).
	DefaultCallTimeout = 30 * time.Second
	// DefaultIdleTimeout retires a client unused that long when
	// Kind.PoolOptions.IdleTimeout is zero.
	DefaultIdleTimeout = 10 * time.Minute
)

// finalizerSuffix ends the default cleanup finalizer: a kind of group g
// without Options.Finalizer is cleaned up under g + finalizerSuffix.
const finalizerSuffix = "/cleanup"

// Kind is one managed kind O for Setup: its adapter and where its objects
// name their connection object (the parent, of kind P); and, on the first
// kind given to Setup, what every kind of the call shares: the pool of
// clients C by key K, the parent's credential Secret, the classifier and
// the tuning of the ledger, hold, watchdog and sweeper.
//
// O and P are pointers to structs registered in the manager's scheme.
type Kind[O, P client.Object, K comparable, C any] struct {
	// Adapter is the external service's verbs for O. Required. With a
	// ledger or a hold it must also implement ParentConnector (with
	// AdapterFuncs, ConnectParentFn): the sweeper and the hold's access
	// check connect from a parent alone.
	Adapter Adapter[O, K, C]
	// ParentName returns the name of the parent (a P in obj's namespace)
	// obj references, "" for none: what Adapter.Connect reads. It indexes
	// O by parent, so it must read obj only. Required unless the hold is
	// skipped (Options.Skip).
	ParentName func(obj O) string
	// Options tune the reconciler: Finalizer ("" is the kind's API group
	// followed by "/cleanup", keys.finale.dev/cleanup say),
	// DefaultPolicy, RetryInterval, VerifyInterval, LastChance and Skip.
	// Scheme, Ledger, Hold, Watchdog, Recorder, APIReader and Clock are
	// Setup's to fill; Classifier may only be the shared one.
	Options Options
	// Controller tunes the kind's controller (SetupWithManager).
	Controller SetupOptions
	// UnauthenticatedNeverSwept accepts an Adapter that does not implement
	// Authenticator (with AdapterFuncs: AuthenticationFn nil) for a kind
	// with cleanup records. The sweeper acts only through a connection
	// that authenticates the service, so with such an adapter every record
	// whose owner goes without its delete (a finalizer removed by hand, a
	// namespace force-cleaned, a hold that timed out) is kept and reported
	// (sweep.Unverified) for ever, and its external resource stays until
	// an admin removes it by hand. Setup refuses such an adapter unless
	// this is set, so that nobody gets that by leaving a method out.
	UnauthenticatedNeverSwept bool

	// The fields below are shared by every kind of one Setup call: set
	// them on the first kind only.

	// Dial makes a client for a key; Setup builds the pool from it and
	// PoolOptions. Give Dial or Pool.
	Dial func(ctx context.Context, key K) (C, error)
	// PoolOptions tune the pool Setup builds: Name ("" is the lower-case
	// kind), Policy, MaxAge, IdleTimeout (zero is DefaultIdleTimeout),
	// CallTimeout (zero is DefaultCallTimeout), DialTimeout, Fence, and
	// Close (nil calls C's own Close() error, when C has one). Dial may
	// be given here instead of Kind.Dial; Classifier and Clock are the
	// Kind's.
	PoolOptions clientpool.Options[K, C]
	// Pool is an existing pool to use instead of Dial and PoolOptions. Its
	// classifier is then the one everything uses.
	Pool *clientpool.Pool[K, C]
	// SecretName returns the name of parent's credential Secret, in its
	// namespace, "" for none: the hold keeps it with the parent. Required
	// unless the hold is skipped.
	SecretName func(parent P) string
	// Classifier is the one classification of errors (errclass.New with
	// the service's extensions) given to the pool, the reconcilers, the
	// ledger, the hold, the watchdog and the sweeper. nil is the Pool's
	// when Pool is given, else errclass.Default.
	Classifier *errclass.Classifier
	// Clock decides everything time decides; nil is the real clock.
	Clock clock.Clock
	// RecordsNamespace holds the cleanup records and the operator key; ""
	// is $POD_NAMESPACE (ledger.NamespaceEnv). Tenants must not be able to
	// write there: parents in it are the sweeper's (see Designated).
	RecordsNamespace string
	// KeySecret names the operator key's Secret in the records namespace;
	// "" is ledger.KeySecretName. Created on first start (ledger.LoadKey).
	KeySecret string
	// EventSource is the Events' reporting controller; "" is "finale-"
	// and the lower-case first kind.
	EventSource string
	// WatchNamespaces lets the Events' guard tell a terminating namespace
	// from the manager's cache (a metadata informer on Namespaces, which
	// needs get, list and watch on namespaces), so that no Event is ever
	// sent into one; false learns it from the first refusal. Either way
	// HoldReleased, ReleasedWithoutDelete and CleanupBlocked Events of a
	// terminating namespace go to the records namespace, naming their
	// object, and the others are dropped. The same informer gives the
	// namespace UID each cleanup record is written with, saving a live
	// read per object (an adoption still reads the claimant's live).
	WatchNamespaces bool
	// HoldOptions tune the hold: Timeout, Recheck, Finalizer,
	// AccessPolicy, Owned, ParentKind, and Access (nil: a proof through
	// the pool, see Setup). Parent, Scheme, SecretName, Dependents, Clock,
	// Recorder, Classifier and Live are Setup's.
	HoldOptions hold.Config
	// WatchdogOptions tune the watchdog: Threshold, and Conditions (nil
	// writes CleanupBlocked into status.conditions,
	// watchdog.StatusConditions). Clock, Recorder, Classifier and Scheme
	// are Setup's.
	WatchdogOptions watchdog.Options
	// CheckInterval is how often the watchdog looks at deletions nobody
	// attempts any more; zero is watchdog.DefaultCheckInterval.
	CheckInterval time.Duration
	// SweepOptions tune the sweeper: Settle, MaxClockSkew, Interval,
	// MaxBackoff, PageSize, Workers and Log. Ledger, Owners, Live,
	// Targets, Recorder, Clock and Classifier are Setup's.
	SweepOptions sweep.Options
	// Designated lists the parents the sweeper may use besides a record's
	// own; nil is every parent in the records namespace, where tenants
	// cannot create any. Return none to use only a record's own.
	Designated Designated
	// CreateLanding is how long after a create's call timeout the service
	// may still complete the create its client abandoned: the service's own
	// bound on a request nobody waits for (a statement or lock timeout, a
	// server-side cancel). For the call timeout plus this long after an
	// attempt whose outcome is unknown, the reconciler neither creates
	// again nor removes the record (ledger.Options.CreateLanding). Zero is
	// the call timeout, for a service that says nothing; one that bounds
	// nothing at all can still complete a create later than any value.
	CreateLanding time.Duration
}

// Sibling is a further kind for Setup on the same parent kind P and pool:
// a Kind[O, P, K, C] of any O, whose shared fields are left empty.
type Sibling[P client.Object, K comparable, C any] interface {
	member(mgr ctrl.Manager, s *runtime.Scheme) (*member[P, K, C], error)
}

// Parts are what Setup built and registered with the manager. A part whose
// guarantee every kind skipped is nil.
type Parts[K comparable, C any] struct {
	Pool *clientpool.Pool[K, C]
	// Classifier is the one every part uses.
	Classifier *errclass.Classifier
	Recorder   Recorder
	Ledger     *ledger.Ledger
	Hold       *hold.Hold
	Watchdog   *watchdog.Watchdog
	Sweeper    *sweep.Sweeper
	// Reconcilers holds each kind's *Reconciler[O, K, C], by kind name.
	Reconcilers map[string]reconcile.Reconciler
}

// Setup wires kind, and more kinds on the same parent kind and pool, with
// every guarantee, registers everything with mgr and returns the parts:
//
//   - the pool, built from Dial (or the given Pool), every call bounded
//     and broken clients evicted by the one Classifier (G1);
//   - the operator key, read live from the records namespace or created
//     there (ctx bounds that), and the ledger of cleanup records in
//     ConfigMaps there (G2: no record, no create);
//   - the hold on the parents and their credential Secrets, with
//     dependents found by ParentName and Secrets by SecretName, and its
//     access check: unless HoldOptions.Access is given, a parent's access
//     is ready when a proof (Adapter.Prove, no enrolment) through the pool
//     reaches the service with a working client: an answer, even "not
//     enrolled", is ready; a failed dial or a Transport, Auth or Identity error is
//     not, and is evented on the parent (G2);
//   - the watchdog, its Runnable and its CleanupBlocked condition (G1);
//   - each kind's reconciler, with its watches (SetupWithManager);
//   - the sweeper, through each record's own parent and the designated
//     ones (G2).
//
// Events go to an events.k8s.io recorder of Setup's (any supported
// controller-runtime), guarded against namespaces being deleted (see
// WatchNamespaces). Configuration is checked before anything is
// registered or created; every error wraps ErrConfig and says what to fix.
func Setup[O, P client.Object, K comparable, C any](ctx context.Context, mgr ctrl.Manager, kind Kind[O, P, K, C], more ...Sibling[P, K, C]) (*Parts[K, C], error) {
	if mgr == nil {
		return nil, fmt.Errorf("%w: Setup needs the manager", ErrConfig)
	}
	w, err := plan(mgr, kind, more)
	if err != nil {
		return nil, err
	}
	return w.build(ctx)
}

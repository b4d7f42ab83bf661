package hold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/errclass"
)

// Finalizer is the default hold finalizer put on a parent and its Secret.
const Finalizer = "hold.finale.dev/hold"

// DefaultTimeout bounds a hold, counted from when the hold started (see
// Started).
const DefaultTimeout = 10 * time.Minute

// DefaultMaxStartDelay bounds how late after a parent's deletionTimestamp
// its hold can start counting (Config.MaxStartDelay): an operator outage
// up to this long still gives the dependents Timeout to delete once it is
// back, and no hold ends later than deletionTimestamp + MaxStartDelay +
// Timeout, whatever restarts happen in between.
const DefaultMaxStartDelay = 24 * time.Hour

// AnnotationStarted is where versions before v0.1.0 wrote the start of a
// deleting parent's hold: on the parent itself, where the parent's users
// can write too (a start in 2000 released the hold at once after an
// outage, one in 9999 held it for ever, and a webhook refusing the write
// kept it for ever). It is neither written nor read any more: one left on
// an object is ignored. The constant stays so that tests can show that.
//
// Deprecated: the hold's start is the hold's own first look at the
// deletion, kept in the operator's memory and never before the
// deletionTimestamp; see Started.
const AnnotationStarted = "hold.finale.dev/started"

// DefaultRecheck is how often a held parent looks again even when no watch
// event arrives: the hold end is measured on an injected clock that no
// informer can observe.
const DefaultRecheck = 30 * time.Second

// Index keys registered by SetupWithManager (or Index).
const (
	// ParentIndex maps a dependent to the name of the parent it references.
	ParentIndex = "hold.finale.dev/parent"
	// SecretIndex maps a parent to the name of its credential Secret.
	SecretIndex = "hold.finale.dev/secret"
)

// Event reasons (on the parent, its Secret or a dependent).
const (
	ReasonHolding               = "DeletionHeld"
	ReasonReleased              = "HoldReleased"
	ReasonReleasedWithoutDelete = "ReleasedWithoutDelete"
	ReasonAccessNotReady        = "HoldAccessNotReady"
)

// Event notes. They are format strings for Eventf.
const (
	noteHolding               = "deletion held: %d dependent(s) still carry their cleanup finalizer (%v); hold ends at %s"
	noteReleased              = "hold released: %s after %s"
	noteReleasedWithoutDelete = "released without deleting the external resource: the hold on %s %q ended; the cleanup record stays for the sweeper"
	noteAccessNotReady        = "access to the external service is not ready during the hold (%s error); retrying: check the connection and its credentials, the cause is in the operator's log"
)

// Event actions.
const (
	actionHold    = "Hold"
	actionRelease = "Release"
)

// Reason says why a hold ended; it is the metrics label.
type Reason string

// Release reasons.
const (
	// ReleasedDependentsDone: no dependent carries its cleanup finalizer.
	ReleasedDependentsDone Reason = "dependents_done"
	// ReleasedTimeout: the hold timeout passed while access was ready.
	ReleasedTimeout Reason = "timeout"
	// ReleasedAccessNotReady: the hold ended (timeout, or at once under
	// SkipHold) while access to the external service was not ready.
	ReleasedAccessNotReady Reason = "access_not_ready"
	// ReleasedOwnedGone: what the parent owns (the service itself) is gone,
	// so no dependent can delete anything through it.
	ReleasedOwnedGone Reason = "owned_gone"
)

// AccessPolicy decides what a hold does when operator access to the
// external service is not ready while the parent is being deleted.
type AccessPolicy int

const (
	// RepairDuringHold keeps the hold and calls Access again on every pass,
	// so access that comes back (a Secret fixed, a server restarted) still
	// lets the dependents delete. The default.
	RepairDuringHold AccessPolicy = iota
	// SkipHold releases at once when access is not ready at deletion time:
	// dependents release without delete right away and the sweeper takes
	// over. For services whose access cannot come back after deletion.
	SkipHold
)

// Recorder emits Events. It is the subset of
// k8s.io/client-go/tools/events.EventRecorder that manager.GetEventRecorder
// returns in controller-runtime v0.25.
type Recorder interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// Access reports (and, where it can, repairs) operator access to the
// external service behind a parent. It is called on every pass of a held
// parent, which is what "keep repairing during the hold" means.
type Access interface {
	Ready(ctx context.Context, parent client.Object) (bool, error)
}

// AccessFn adapts a function to Access.
type AccessFn func(ctx context.Context, parent client.Object) (bool, error)

// Ready calls f.
func (f AccessFn) Ready(ctx context.Context, parent client.Object) (bool, error) {
	return f(ctx, parent)
}

// Owned reports whether what the parent owns (the Deployment running the
// service, say) still exists. Consulted only while the parent is being
// deleted and its foregroundDeletion finalizer is absent: a foreground
// delete that finished before the first reconcile has already taken the
// service away.
type Owned interface {
	Exists(ctx context.Context, parent client.Object) (bool, error)
}

// OwnedFn adapts a function to Owned.
type OwnedFn func(ctx context.Context, parent client.Object) (bool, error)

// Exists calls f.
func (f OwnedFn) Exists(ctx context.Context, parent client.Object) (bool, error) {
	return f(ctx, parent)
}

// Dependent describes one kind that references a parent.
type Dependent struct {
	// Kind labels metrics and messages; defaults to the Go type name.
	Kind string
	// Object is an empty object of the kind (typed, or Unstructured with its
	// GroupVersionKind set).
	Object client.Object
	// ParentName returns the name of the parent (same namespace) obj
	// references, or "" for none.
	ParentName func(obj client.Object) string
	// CleanupFinalizer is the finalizer the dependent's reconciler holds
	// while it has something to delete outside the cluster.
	CleanupFinalizer string
}

// Config configures a Hold.
type Config struct {
	// Parent is an empty object of the parent kind (typed, or Unstructured
	// with its GroupVersionKind set).
	Parent client.Object
	// ParentKind labels metrics; defaults to the Go type name.
	ParentKind string
	// SecretName returns the name of the parent's credential Secret in its
	// namespace, or "" for none.
	SecretName func(parent client.Object) string
	// Dependents are the kinds that reference the parent. At least one.
	Dependents []Dependent
	// Scheme maps objects to kinds; required.
	Scheme *runtime.Scheme

	// Finalizer defaults to Finalizer.
	Finalizer string
	// Timeout defaults to DefaultTimeout. It counts from when the hold
	// first saw the parent being deleted (Started), and never from before
	// its deletionTimestamp.
	Timeout time.Duration
	// MaxStartDelay defaults to DefaultMaxStartDelay. A hold starts
	// counting at its first look at the deletion, but never later than
	// MaxStartDelay after the deletionTimestamp, so every hold ends by
	// deletionTimestamp + MaxStartDelay + Timeout.
	MaxStartDelay time.Duration
	// Recheck defaults to DefaultRecheck.
	Recheck time.Duration
	// Clock measures the hold; defaults to the real clock.
	Clock clock.PassiveClock
	// Access is optional; nil means always ready.
	Access Access
	// AccessPolicy applies when Access reports not ready.
	AccessPolicy AccessPolicy
	// Owned is optional; nil means the check is skipped.
	Owned Owned
	// Recorder is optional; nil drops Events.
	Recorder Recorder
	// Live reads from the API server itself (the manager's APIReader;
	// SetupWithManager fills it in). A hold is taken off a parent or a
	// Secret only after a live count agrees with the cache's that nothing
	// needs it: a cache that lags (rebuilt after a restart, behind a
	// lagging apiserver) must not strand a dependent. nil trusts the
	// reader the reconcilers are given.
	Live client.Reader
	// Classifier names the class of an Access error in the
	// HoldAccessNotReady Event (the error itself goes to the log only);
	// nil is errclass.Default.
	Classifier *errclass.Classifier
}

// Hold keeps a parent and its credential Secret while dependents still
// need them. Build one with New; it is safe for concurrent use.
type Hold struct {
	cfg        Config
	dependents []dependentKind

	mu     sync.Mutex                    // guards active, starts and setUp
	active map[types.NamespacedName]bool // parents currently held while deleting
	// starts is when the hold first looked at each parent's deletion: the
	// start of its hold. It lives here, in the operator's memory, because
	// nothing a tenant can write may move it and no failed write may
	// change it; see Started.
	starts map[types.NamespacedName]start
	// setUp is set once SetupWithManager registered the controllers: every
	// dependent kind's reconciler calls it, the first one does the work.
	setUp bool
}

// start is the hold's first look at one deletion of a parent: uid tells a
// parent recreated under the same name apart.
type start struct {
	uid types.UID
	at  time.Time
}

type dependentKind struct {
	Dependent
	newList func() (client.ObjectList, error)
}

// ErrConfig is wrapped by every configuration error from New.
var ErrConfig = errors.New("hold: invalid configuration")

// New validates cfg and fills its defaults.
func New(cfg Config) (*Hold, error) {
	if cfg.Scheme == nil {
		return nil, fmt.Errorf("%w: Scheme is required", ErrConfig)
	}
	if cfg.Parent == nil {
		return nil, fmt.Errorf("%w: Parent is required (an empty object of the parent kind)", ErrConfig)
	}
	if cfg.SecretName == nil {
		return nil, fmt.Errorf("%w: SecretName is required (return \"\" for parents without a Secret)", ErrConfig)
	}
	if len(cfg.Dependents) == 0 {
		return nil, fmt.Errorf("%w: at least one Dependent kind is required", ErrConfig)
	}
	if cfg.Timeout < 0 || cfg.Recheck < 0 || cfg.MaxStartDelay < 0 {
		return nil, fmt.Errorf("%w: Timeout, Recheck and MaxStartDelay must not be negative", ErrConfig)
	}
	if cfg.ParentKind == "" {
		cfg.ParentKind = kindName(cfg.Scheme, cfg.Parent)
	}
	if cfg.Finalizer == "" {
		cfg.Finalizer = Finalizer
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Recheck == 0 {
		cfg.Recheck = DefaultRecheck
	}
	if cfg.MaxStartDelay == 0 {
		cfg.MaxStartDelay = DefaultMaxStartDelay
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Classifier == nil {
		cfg.Classifier = errclass.Default
	}
	h := &Hold{cfg: cfg, active: map[types.NamespacedName]bool{}, starts: map[types.NamespacedName]start{}}
	seen := map[string]bool{}
	for i, d := range cfg.Dependents {
		if d.Object == nil || d.ParentName == nil || d.CleanupFinalizer == "" {
			return nil, fmt.Errorf("%w: Dependents[%d] needs Object, ParentName and CleanupFinalizer", ErrConfig, i)
		}
		if d.Kind == "" {
			d.Kind = kindName(cfg.Scheme, d.Object)
		}
		if seen[d.Kind] {
			return nil, fmt.Errorf("%w: Dependents[%d]: kind %q listed twice", ErrConfig, i, d.Kind)
		}
		seen[d.Kind] = true
		newList, err := listFactory(cfg.Scheme, d.Object)
		if err != nil {
			return nil, fmt.Errorf("%w: Dependents[%d] (%s): %w", ErrConfig, i, d.Kind, err)
		}
		h.dependents = append(h.dependents, dependentKind{Dependent: d, newList: newList})
	}
	return h, nil
}

// CleanupFinalizer is the cleanup finalizer this Hold waits for on
// dependents of obj's kind; false when obj's kind is not a dependent.
func (h *Hold) CleanupFinalizer(obj client.Object) (string, bool) {
	d, err := h.kindOf(obj)
	if err != nil {
		return "", false
	}
	return d.CleanupFinalizer, true
}

// Parent returns a new empty object of the parent kind.
func (h *Hold) Parent() client.Object { return newObject(h.cfg.Parent) }

// ParentName returns the name of the parent dep references ("" for none);
// false when dep's kind is not a dependent.
func (h *Hold) ParentName(dep client.Object) (string, bool) {
	d, err := h.kindOf(dep)
	if err != nil {
		return "", false
	}
	return d.ParentName(dep), true
}

// SecretName returns the name of parent's credential Secret, "" for none.
func (h *Hold) SecretName(parent client.Object) string { return h.cfg.SecretName(parent) }

// Finalizer is the hold finalizer this Hold puts on parents and Secrets.
func (h *Hold) Finalizer() string { return h.cfg.Finalizer }

// Timeout is the hold bound.
func (h *Hold) Timeout() time.Duration { return h.cfg.Timeout }

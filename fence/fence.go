package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// DefaultMarginDivisor sets the margin when Options.Margin is zero: a fifth
// of the lease duration. With controller-runtime's defaults (lease 15s,
// renew deadline 10s, retry period 2s) the fence ends 12s after the last
// renewal was sent: after the renew deadline, so a replica whose renewals
// merely fail gives up leading before its fence stops it, and 3s before
// another replica can take the lease, which covers clock-rate differences
// of a few percent and the last call's flight to the service.
const DefaultMarginDivisor = 5

// Options configure a Lock.
type Options struct {
	// LeaseDuration is the election's lease duration (the manager's
	// LeaseDuration). Required, at least one second: client-go records it
	// in whole seconds, and the other replicas wait what the record says.
	LeaseDuration time.Duration
	// Margin is how long before the lease could pass the fence ends; zero
	// is LeaseDuration/DefaultMarginDivisor. It must be shorter than the
	// lease duration as recorded (whole seconds).
	Margin time.Duration
	// Clock reads the local time before each write; nil is the real
	// clock. Its readings must be comparable with the clock of whoever
	// reads Until (clientpool compares them with its own).
	Clock clock.PassiveClock
}

// Lock is a resourcelock.Interface that wraps the lock the leader elector
// uses and keeps the fence: the time until which no other replica can hold
// the lease, from the renewals this replica made. It is safe for concurrent
// use.
type Lock struct {
	inner  resourcelock.Interface
	clock  clock.PassiveClock
	lease  time.Duration
	margin time.Duration

	mu sync.Mutex
	// until is the fence; zero while this replica holds no lease. Guarded
	// by mu.
	until time.Time
	// epoch counts the times the fence was dropped, so that a write sent
	// before a drop cannot revive it when it returns. Guarded by mu.
	epoch uint64
	// landed is the last successful write's record as the others see it
	// (observed), basis the time the fence counts from for it. Guarded by
	// mu.
	landed string
	basis  time.Time
	// attempts holds, per observed record, the send time of the earliest
	// write that carried it since the last successful one. Guarded by mu.
	attempts map[string]time.Time
}

var _ resourcelock.Interface = (*Lock)(nil)

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("fence: bad configuration")

// New wraps inner (the Lease lock the election uses). It fails when inner
// is nil or the options do not Validate.
func New(inner resourcelock.Interface, o Options) (*Lock, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: the wrapped lock is nil", ErrConfig)
	}
	recorded, margin, err := o.resolve()
	if err != nil {
		return nil, err
	}
	l := &Lock{inner: inner, clock: o.Clock, lease: recorded, margin: margin, attempts: map[string]time.Time{}}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	return l, nil
}

// Validate reports what New would reject in o: a lease duration under a
// second, a margin that is negative or not shorter than the recorded lease
// duration.
func (o Options) Validate() error {
	_, _, err := o.resolve()
	return err
}

// resolve returns the lease duration as recorded (whole seconds) and the
// margin in use.
func (o Options) resolve() (recorded, margin time.Duration, err error) {
	recorded = o.LeaseDuration.Truncate(time.Second)
	if recorded < time.Second {
		return 0, 0, fmt.Errorf("%w: lease duration %v: use at least 1s (the Lease records whole seconds)", ErrConfig, o.LeaseDuration)
	}
	margin = o.Margin
	if margin == 0 {
		margin = o.LeaseDuration / DefaultMarginDivisor
	}
	if margin < 0 || margin >= recorded {
		return 0, 0, fmt.Errorf("%w: margin %v: use a positive duration shorter than the recorded lease duration %v, or 0 for the default", ErrConfig, o.Margin, recorded)
	}
	return recorded, margin, nil
}

// Until is the time until which this replica may act for the lease: the
// send time of its last successful acquisition or renewal (of the first
// write of that record, when later renewals looked the same to the other
// replicas), plus the lease duration recorded with it, minus the margin.
// It is the zero time while this replica holds no lease, after a release,
// and once a read of the lock showed another holder or no lock at all.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Margin is the margin in use (Options.Margin or its default).
func (l *Lock) Margin() time.Duration { return l.margin }

// Get implements resourcelock.Interface. A record naming another holder,
// or none, or a lock that is gone, drops the fence: another replica may
// already lead (a deleted Lease can be created by anyone at once).
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.inner.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		l.drop()
	case err == nil && rec != nil && rec.HolderIdentity != l.inner.Identity():
		l.drop()
	}
	return rec, raw, err
}

// Create implements resourcelock.Interface.
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.inner.Create(ctx, ler) })
}

// Update implements resourcelock.Interface.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.inner.Update(ctx, ler) })
}

// write sends a record. The time is read before the request goes out: the
// others start counting the lease duration only once they have read the
// record, which lands after it was sent. A record for another holder (a
// release writes an empty one) drops the fence before it is sent. A failed
// write leaves the fence as it was: the others still honour the last write
// that landed, and a write that failed on our side may have landed, which
// only lengthens the lease.
//
// A renewal the others cannot tell from the previous record does not
// extend the fence: client-go's elector restarts its count only when the
// record it reads differs from the one it saw before, and the record's
// times have whole-second precision, so several renewals within one second
// look like the first. The fence therefore counts from the earliest write
// of the run of identical records that ends with this one (see seen).
func (l *Lock) write(ler resourcelock.LeaderElectionRecord, send func() error) error {
	if ler.HolderIdentity != l.inner.Identity() {
		l.drop()
		return send()
	}
	key := observed(ler)
	l.mu.Lock()
	epoch := l.epoch
	sent := l.clock.Now()
	if _, ok := l.attempts[key]; !ok {
		l.attempts[key] = sent
	}
	l.mu.Unlock()
	if err := send(); err != nil {
		return err
	}
	recorded := min(time.Duration(ler.LeaseDurationSeconds)*time.Second, l.lease)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epoch != epoch {
		return nil
	}
	if key != l.landed {
		// A record the others can tell apart: their count restarts at
		// the earliest attempt that carried it since the last landed
		// write (any of them may be the one that landed first).
		l.landed, l.basis = key, l.attempts[key]
	}
	clear(l.attempts)
	if recorded <= l.margin {
		// A record shorter than the margin (written by another build)
		// gives no time to act in.
		l.until = time.Time{}
		return nil
	}
	l.until = l.basis.Add(recorded - l.margin)
	return nil
}

// observed is the record as another replica's elector compares it: the
// Lease spec the lock writes, read back into a record and marshalled, as
// client-go's LeaseLock.Get does.
func observed(ler resourcelock.LeaderElectionRecord) string {
	spec := resourcelock.LeaderElectionRecordToLeaseSpec(&ler)
	b, err := json.Marshal(*resourcelock.LeaseSpecToLeaderElectionRecord(&spec))
	if err != nil {
		// Not reachable for this plain struct; a key no other write
		// shares only makes the fence count from this write's send.
		return fmt.Sprintf("unmarshallable %p", &ler)
	}
	return string(b)
}

func (l *Lock) drop() {
	l.mu.Lock()
	l.until, l.basis, l.landed = time.Time{}, time.Time{}, ""
	clear(l.attempts)
	l.epoch++
	l.mu.Unlock()
}

// RecordEvent implements resourcelock.Interface.
func (l *Lock) RecordEvent(s string) { l.inner.RecordEvent(s) }

// Identity implements resourcelock.Interface.
func (l *Lock) Identity() string { return l.inner.Identity() }

// Describe implements resourcelock.Interface.
func (l *Lock) Describe() string { return l.inner.Describe() }

// LeaseOptions name the Lease of an election.
type LeaseOptions struct {
	// Namespace and Name of the Lease. Required.
	Namespace, Name string
	// Identity is this replica's, unique among the replicas; "" is the
	// host name, "_" and a random UUID, as controller-runtime makes it.
	Identity string
	// RenewDeadline bounds each request to the API server at half of it
	// (at least a second), as controller-runtime does, so that one hung
	// request cannot use up the whole renew deadline. Zero leaves the
	// config's timeout.
	RenewDeadline time.Duration
}

// NewLease returns the Lease lock controller-runtime would make for
// LeaderElectionResourceLock "leases" (without its events), for New to wrap.
func NewLease(cfg *rest.Config, o LeaseOptions) (*resourcelock.LeaseLock, error) {
	if cfg == nil || o.Namespace == "" || o.Name == "" {
		return nil, fmt.Errorf("%w: NewLease needs a config, a namespace and a name", ErrConfig)
	}
	id := o.Identity
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("fence: an identity for the election: %w", err)
		}
		id = host + "_" + string(uuid.NewUUID())
	}
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	if o.RenewDeadline > 0 {
		cfg.Timeout = max(o.RenewDeadline/2, time.Second)
	}
	c, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("fence: lease client: %w", err)
	}
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Client:     c,
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}, nil
}

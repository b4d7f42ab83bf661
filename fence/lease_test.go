package fence_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/fence"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Election timing for the tests: short, so a takeover takes seconds, with
// a renew deadline generous for a loaded machine.
const (
	leaseDuration = 3 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 250 * time.Millisecond
)

// replica is one candidate: its fenced lock and its elector.
type replica struct {
	lock   *fence.Lock
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// leading is closed when it starts leading; stopped when it stops.
	leading, stopped chan struct{}
	// startedAt is the local time OnStartedLeading ran.
	startedAt time.Time
}

func newReplica(t *testing.T, ns, id string, gate *gate) *replica {
	t.Helper()
	lease, err := fence.NewLease(testenv.ControlPlane(t).Config, fence.LeaseOptions{Namespace: ns, Name: "test-election", Identity: id, RenewDeadline: renewDeadline})
	if err != nil {
		t.Fatal(err)
	}
	var inner resourcelock.Interface = lease
	if gate != nil {
		gate.inner = lease
		inner = gate
	}
	l, err := fence.New(inner, fence.Options{LeaseDuration: leaseDuration})
	if err != nil {
		t.Fatal(err)
	}
	return &replica{lock: l, leading: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{})}
}

// run starts the replica's elector; it runs until stop (no release: a
// stopped replica is a crashed one, as far as the others can tell).
func (r *replica) run(t *testing.T) {
	t.Helper()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: r.lock, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Name: r.lock.Identity(),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				r.mu.Lock()
				r.startedAt = time.Now()
				r.mu.Unlock()
				close(r.leading)
			},
			OnStoppedLeading: func() { close(r.stopped) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); le.Run(ctx) }()
	t.Cleanup(r.stop)
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: not within 60s", what)
	}
}

// sentOfAcquisition is when the replica's winning write went out, read
// back from its fence.
func sentOfAcquisition(r *replica) time.Time {
	return r.lock.Until().Add(-(leaseDuration - r.lock.Margin()))
}

// On the real Lease API: the fence of a leader that stops renewing ends at
// least the margin before another replica's acquisition was even sent.
func TestFenceEndsBeforeTakeover(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	a := newReplica(t, ns, "a", nil)
	a.run(t)
	waitClosed(t, a.leading, "a leads")
	if u := a.lock.Until(); !u.After(time.Now()) {
		t.Fatalf("a leads but its fence %v has passed", u)
	}
	b := newReplica(t, ns, "b", nil)
	b.run(t)
	// b must not lead while a renews: watch a few renewals go by.
	renewed := a.lock.Until()
	err := controlplane.WaitFor(t.Context(), 30*time.Second, "a renews", func(context.Context) (bool, error) {
		return a.lock.Until().After(renewed.Add(3 * retryPeriod)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.leading:
		t.Fatal("b leads while a renews")
	default:
	}

	a.stop() // a crashes: no release
	aUntil := a.lock.Until()
	waitClosed(t, b.leading, "b takes over")
	bSent := sentOfAcquisition(b)
	if gap := bSent.Sub(aUntil); gap < a.lock.Margin() {
		t.Fatalf("b's acquisition was sent %v after a's fence ended; want at least the margin %v", gap, a.lock.Margin())
	}
	t.Logf("a's fence ended %v before b's acquisition was sent (margin %v)", bSent.Sub(aUntil), a.lock.Margin())
}

// gate blocks the wrapped lock's writes while closed: a paused replica
// whose renewal cannot go out.
type gate struct {
	inner resourcelock.Interface
	mu    sync.Mutex
	open  chan struct{} // closed while writes may pass; guarded by mu
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) pause() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *gate) wait() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	<-ch
}

func (g *gate) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	g.wait()
	return g.inner.Get(ctx)
}

func (g *gate) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	g.wait()
	return g.inner.Create(ctx, ler)
}

func (g *gate) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	g.wait()
	return g.inner.Update(ctx, ler)
}
func (g *gate) RecordEvent(s string) { g.inner.RecordEvent(s) }
func (g *gate) Identity() string     { return g.inner.Identity() }
func (g *gate) Describe() string     { return g.inner.Describe() }

// The zombie: a leader whose lock calls hang (paused) loses its lease; by
// the time the other leads, its fence has passed, and when it wakes, its
// stale renewal does not revive the fence and its next read drops it.
func TestZombieFenceStaysDown(t *testing.T) {
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	g := newGate()
	a := newReplica(t, ns, "a", g)
	a.run(t)
	waitClosed(t, a.leading, "a leads")
	g.pause()
	b := newReplica(t, ns, "b", nil)
	b.run(t)
	waitClosed(t, b.leading, "b takes over")
	b.mu.Lock()
	started := b.startedAt
	b.mu.Unlock()
	if u := a.lock.Until(); !u.Before(started) {
		t.Fatalf("a's fence %v had not passed when b started leading at %v", u, started)
	}
	g.resume()
	// a's elector either gives up (renew deadline) or reads b's record:
	// either way its fence must not come back while b leads.
	waitClosed(t, a.stopped, "a stops leading")
	err := controlplane.WaitFor(t.Context(), 30*time.Second, "a's fence dropped", func(context.Context) (bool, error) {
		return a.lock.Until().Before(time.Now()), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if u := a.lock.Until(); u.After(started) {
		t.Fatalf("a's fence came back to %v after b started leading at %v", u, started)
	}
}

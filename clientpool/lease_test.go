package clientpool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/errclass"
)

// leased runs body on a lease of key as adopting code does (one deferred
// Release of the named result) and returns what the function returns.
func leased(ctx context.Context, p *clientpool.Pool[string, *fakeClient], key string, body func(ctx context.Context, c *fakeClient) error) (err error) {
	lease, err := p.Acquire(ctx, key)
	if err != nil {
		return err
	}
	defer lease.Release(&err)
	return body(lease.Context(), lease.Client())
}

// TestLeaseAppliesDosPolicy: a lease released with an error does what Do
// does with fn's error (the same classes evict, the same error comes
// back, the same metrics), so the two can be mixed on one pool.
func TestLeaseAppliesDosPolicy(t *testing.T) {
	type result struct {
		NextClient int64
		OldCloses  int32
		Returned   bool // the body's error came back unchanged
	}
	cases := map[string]struct {
		err  error
		want result
	}{
		"success keeps":             {nil, result{1, 0, true}},
		"grpc unavailable evicts":   {status.Error(codes.Unavailable, "x"), result{2, 1, true}},
		"own deadline evicts":       {context.DeadlineExceeded, result{2, 1, true}},
		"k8s forbidden evicts":      {apierrors.NewForbidden(gr, "x", errors.New("rbac")), result{2, 1, true}},
		"not found keeps":           {status.Error(codes.NotFound, "x"), result{1, 0, true}},
		"conflict keeps":            {apierrors.NewConflict(gr, "x", errors.New("changed")), result{1, 0, true}},
		"canceled keeps":            {context.Canceled, result{1, 0, true}},
		"unknown keeps":             {errors.New("odd"), result{1, 0, true}},
		"wrapped unavailable evict": {fmt.Errorf("delete deployment: %w", status.Error(codes.Unavailable, "x")), result{2, 1, true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, via := range []string{"lease", "do"} {
				f := &fakes{}
				p := newFakePool(t, f, nil)
				var err error
				if via == "lease" {
					err = leased(t.Context(), p, "k", func(context.Context, *fakeClient) error { return tc.err })
				} else {
					err = p.Do(t.Context(), "k", func(context.Context, *fakeClient) error { return tc.err })
				}
				got := result{NextClient: use(t, t.Context(), p, "k", nil), OldCloses: f.closes()[1], Returned: err == tc.err}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", via, diff)
				}
			}
		})
	}
}

// TestLeaseMetricsMatchDo: the same calls through Do and through leases
// count the same.
func TestLeaseMetricsMatchDo(t *testing.T) {
	answers := []error{nil, status.Error(codes.NotFound, "x"), status.Error(codes.Unavailable, "x"), nil}
	counts := func(via string) map[string]float64 {
		f := &fakes{}
		var name string
		p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) { name = o.Name })
		for _, a := range answers {
			body := func(context.Context, *fakeClient) error { return a }
			if via == "lease" {
				_ = leased(t.Context(), p, "k", body)
			} else {
				_ = p.Do(t.Context(), "k", body)
			}
		}
		return map[string]float64{
			"dials":               metricValue(t, "finale_clientpool_dials_total", name, "success"),
			"calls OK":            metricValue(t, "finale_clientpool_calls_total", name, "OK"),
			"calls NotFound":      metricValue(t, "finale_clientpool_calls_total", name, "NotFound"),
			"calls Transport":     metricValue(t, "finale_clientpool_calls_total", name, "Transport"),
			"evictions Transport": metricValue(t, "finale_clientpool_evictions_total", name, "Transport"),
			"closes":              metricValue(t, "finale_clientpool_closes_total", name, "success"),
		}
	}
	if diff := cmp.Diff(counts("do"), counts("lease")); diff != "" {
		t.Errorf("Do (-) and leases (+) count differently:\n%s", diff)
	}
}

// TestLeaseReleaseOnce: a second Release, a nil error pointer and a nil
// Lease change nothing; a client is released once, so it can be closed.
func TestLeaseReleaseOnce(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, nil)
	lease, err := p.Acquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	other, err := p.Acquire(t.Context(), "k") // a second holder of the same client
	if err != nil {
		t.Fatal(err)
	}
	lease.Release(nil)
	lease.Release(nil)
	var nilLease *clientpool.Lease[string, *fakeClient]
	nilLease.Release(nil)
	p.Evict("k")
	if diff := cmp.Diff(map[int64]int32{1: 0}, f.closes()); diff != "" {
		t.Fatalf("closed while the other lease holds it (-want +got):\n%s", diff)
	}
	errUnavailable := status.Error(codes.Unavailable, "x")
	got := errUnavailable
	other.Release(&got)
	if got != errUnavailable {
		t.Errorf("Release changed the error to %v", got)
	}
	if diff := cmp.Diff(map[int64]int32{1: 1}, f.closes()); diff != "" {
		t.Errorf("closes after the last release (-want +got):\n%s", diff)
	}
}

// TestLeaseContext: the lease's context is bounded like Do's, with cause
// errclass.ErrCallTimeout, and a lease released in time is not abandoned.
func TestLeaseContext(t *testing.T) {
	// The grace after the bound is a twentieth of it: 250 ms here, so
	// that a loaded machine (make test's load reaches 20 on 2 cores)
	// still runs the body's return within it. At 200 ms the grace was
	// 10 ms, and the lease was abandoned under that load.
	const bound = 5 * time.Second
	var name string
	p := newFakePool(t, &fakes{}, func(o *clientpool.Options[string, *fakeClient]) {
		o.CallTimeout, name = bound, o.Name
	})
	err := leased(t.Context(), p, "k", func(ctx context.Context, _ *fakeClient) error {
		d, ok := ctx.Deadline()
		if left := time.Until(d); !ok || left > bound {
			return fmt.Errorf("deadline in %v (%v), want within %v", left, ok, bound)
		}
		<-ctx.Done() // a client that honours its context
		if !errors.Is(context.Cause(ctx), errclass.ErrCallTimeout) {
			return fmt.Errorf("cause %v", context.Cause(ctx))
		}
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errclass.ErrCallTimeout) {
		t.Fatalf("Release gave %v, want the body's own deadline error", err)
	}
	if got := use(t, t.Context(), p, "k", nil); got != 2 {
		t.Errorf("next call used client %d, want 2: a timed-out lease evicts", got)
	}
	if got := metricValue(t, "finale_clientpool_abandoned_total", name); got != 0 {
		t.Errorf("abandoned %v, want 0: the body returned at the bound", got)
	}
}

// TestAbandonedLease: code blocked in a client that ignores its context
// (here: until the client is closed) is unblocked by the lease's guard at
// the bound; Release reports Transport whatever the body returned, and
// the next lease dials afresh. With NeverEvict the client is kept.
func TestAbandonedLease(t *testing.T) {
	cases := map[string]struct {
		policy     clientpool.Policy
		wantClient int64 // the next lease's
		wantCloses map[int64]int32
	}{
		"default policy": {wantClient: 2, wantCloses: map[int64]int32{1: 1, 2: 0}},
		"never evict":    {policy: clientpool.NeverEvict, wantClient: 1, wantCloses: map[int64]int32{1: 0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakes{}
			var pool string
			p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) {
				o.CallTimeout, o.Policy, pool = 100*time.Millisecond, tc.policy, o.Name
			})
			// With NeverEvict the guard counts the lease abandoned and
			// leaves the client open: the test unblocks the body then.
			unblock := make(chan struct{})
			go func() {
				defer close(unblock)
				err := controlplane.WaitFor(t.Context(), seedWait, "the lease abandoned", func(context.Context) (bool, error) {
					return metricValue(t, "finale_clientpool_abandoned_total", pool) == 1, nil
				})
				if err != nil {
					t.Error(err)
				}
			}()
			err := leased(t.Context(), p, "k", func(_ context.Context, c *fakeClient) error {
				select {
				case <-c.gone: // closed by the guard
					return errors.New("use of closed connection")
				case <-unblock: // with NeverEvict
					return nil
				case <-time.After(seedWait):
					return errors.New("never unblocked")
				}
			})
			<-unblock
			if got := errclass.Of(t.Context(), err); got != errclass.Transport || !errors.Is(err, errclass.ErrCallTimeout) {
				t.Fatalf("Release gave %v (%s), want Transport wrapping ErrCallTimeout", err, got)
			}
			got := leasedClient(t, p)
			if got != tc.wantClient {
				t.Errorf("next lease got client %d, want %d", got, tc.wantClient)
			}
			if diff := cmp.Diff(tc.wantCloses, f.closes()); diff != "" {
				t.Errorf("closes (-want +got):\n%s", diff)
			}
			if got := metricValue(t, "finale_clientpool_abandoned_total", pool); got != 1 {
				t.Errorf("abandoned %v, want 1", got)
			}
		})
	}
}

func leasedClient(t *testing.T, p *clientpool.Pool[string, *fakeClient]) int64 {
	t.Helper()
	var id int64
	if err := leased(t.Context(), p, "k", func(_ context.Context, c *fakeClient) error { id = c.id; return nil }); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestLeaseOnTheFrozenStack: a lease passed down to a helper that blocks
// in a client ignoring its context, behind the frozen proxy. The guard
// closes the client at the bound, which ends the helper's read; Release
// reports Transport; the next lease dials afresh and works.
func TestLeaseOnTheFrozenStack(t *testing.T) {
	const bound = time.Second
	s := startFrozenLineStack(t, bound)
	start := time.Now()
	err := func() (err error) {
		lease, err := s.pool.Acquire(t.Context(), "k")
		if err != nil {
			return err
		}
		defer lease.Release(&err)
		return ping(lease.Context(), lease.Client())
	}()
	elapsed := time.Since(start)
	if got := errclass.Of(t.Context(), err); got != errclass.Transport || !errors.Is(err, errclass.ErrCallTimeout) {
		t.Fatalf("lease = %v (class %s), want Transport wrapping errclass.ErrCallTimeout", err, got)
	}
	if elapsed < bound || elapsed > bound+bound/20+time.Second {
		t.Fatalf("the helper was unblocked after %v, want the bound %v and a little", elapsed, bound)
	}
	if diff := cmp.Diff(map[int64]int32{1: 1}, s.clients.closes()); diff != "" {
		t.Errorf("closes (-want +got):\n%s", diff)
	}
	lease, err := s.pool.Acquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	err = ping(lease.Context(), lease.Client())
	lease.Release(&err)
	if err != nil || lease.Client().id != 2 {
		t.Fatalf("next lease: client %d, %v; want a fresh client 2 that works", lease.Client().id, err)
	}
	if got := metricValue(t, "finale_clientpool_abandoned_total", s.name); got != 1 {
		t.Errorf("abandoned %v, want 1", got)
	}
}

// TestDoAbandonedPanicsAndGoexit: a bounded fn runs on its own goroutine;
// a panic in it still reaches Do's caller, and a panic after the call was
// abandoned is dropped (its client was closed under it: a crash would be
// the pool's doing).
func TestDoAbandonedPanicsAndGoexit(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = 100 * time.Millisecond })
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the fn's panic", r)
			}
		}()
		_ = p.Do(t.Context(), "k", func(context.Context, *fakeClient) error { panic("boom") })
	}()

	// runtime.Goexit in fn (t.FailNow in a test's fn) ends Do's caller
	// too, as it would have run on the caller's goroutine.
	after, exited := false, make(chan struct{})
	go func() {
		defer close(exited)
		_ = p.Do(t.Context(), "k", func(context.Context, *fakeClient) error { runtime.Goexit(); return nil })
		after = true
	}()
	<-exited
	if after {
		t.Fatal("Do returned after fn called runtime.Goexit")
	}

	panicked := make(chan struct{})
	err := p.Do(t.Context(), "k", func(_ context.Context, c *fakeClient) error {
		defer close(panicked)
		<-c.gone
		panic("closed under me")
	})
	if !errors.Is(err, errclass.ErrCallTimeout) {
		t.Fatalf("Do = %v, want abandoned", err)
	}
	<-panicked
	if diff := cmp.Diff(map[int64]int32{1: 1}, f.closes()); diff != "" {
		t.Errorf("closes (-want +got):\n%s", diff)
	}
}

// TestDoNoTimeLeft: with CallTimeout, a caller whose deadline leaves no
// time gets a deadline error without fn being called, and the client is
// kept: a client that ignores its context would otherwise hold it with no
// bound.
func TestDoNoTimeLeft(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = time.Second })
	use(t, t.Context(), p, "k", nil)
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	err := p.Do(ctx, "k", func(context.Context, *fakeClient) error {
		t.Error("fn called with no time left")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) || errclass.Of(ctx, err) != errclass.Canceled {
		t.Fatalf("Do = %v, want a deadline error (Canceled under the caller's context)", err)
	}
	if _, err := p.Acquire(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v, want a deadline error", err)
	}
	if got := use(t, t.Context(), p, "k", nil); got != 1 {
		t.Errorf("next call used client %d, want 1 (kept)", got)
	}
}

// TestNoLeakUnderChurnWithAbandonment: concurrent Do calls and leases on a
// few keys, some ignoring their context until their client is closed,
// some failing, with concurrent Evicts and Puts, then Close: every client
// is closed exactly once, and every abandoned call returns.
func TestNoLeakUnderChurnWithAbandonment(t *testing.T) {
	f := &fakes{}
	var name string
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) {
		o.CallTimeout, name = 20*time.Millisecond, o.Name
	})
	var puts []*fakeClient
	var putMu sync.Mutex
	answers := []error{nil, nil, status.Error(codes.Unavailable, "x"), status.Error(codes.NotFound, "x")}
	keys := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	// pending holds, for each Do the pool abandoned, a channel its body
	// closes on return. An abandoned body may not even have started when
	// Do returns (its goroutine unscheduled for the whole bound and grace
	// on a loaded machine), so it cannot count itself in: a WaitGroup's
	// Add in the body raced with the Wait below (seen in a warm make test).
	var pending []chan struct{}
	var pendingMu sync.Mutex
	var hung atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				key := keys[(g+i)%len(keys)]
				returned := make(chan struct{})
				body := func(_ context.Context, c *fakeClient) error {
					defer close(returned)
					if (g+i)%9 == 0 && c.gone != nil {
						hung.Add(1)
						<-c.gone // ignores its context until closed
						return errors.New("closed")
					}
					return answers[(g*5+i)%len(answers)]
				}
				switch i % 13 {
				case 0:
					p.Evict(key)
				case 1:
					c := &fakeClient{id: -int64(g*100 + i), gone: make(chan struct{})}
					if p.Put(key, c) == nil {
						putMu.Lock()
						puts = append(puts, c)
						putMu.Unlock()
					}
				}
				if i%2 == 0 {
					// The lease runs body on this goroutine; Do on its own,
					// which an abandoned call leaves running.
					if err := p.Do(t.Context(), key, body); errors.Is(err, errclass.ErrCallTimeout) {
						pendingMu.Lock()
						pending = append(pending, returned)
						pendingMu.Unlock()
					}
				} else {
					_ = leased(t.Context(), p, key, body)
				}
			}
		}()
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, returned := range pending { // every abandoned call returned: its client was closed
		<-returned
	}
	if hung.Load() == 0 || metricValue(t, "finale_clientpool_abandoned_total", name) == 0 {
		t.Fatal("no call was abandoned: the churn does not test abandonment")
	}
	// Abandoned clients are closed on their own goroutines.
	waitFor(t, "every client closed", func() bool {
		for _, n := range f.closes() {
			if n == 0 {
				return false
			}
		}
		for _, c := range puts {
			if c.closed.Load() == 0 {
				return false
			}
		}
		return true
	})
	for id, n := range f.closes() {
		if n != 1 {
			t.Errorf("client %d closed %d times, want 1", id, n)
		}
	}
	for _, c := range puts {
		if n := c.closed.Load(); n != 1 {
			t.Errorf("put client %d closed %d times, want 1", c.id, n)
		}
	}
}

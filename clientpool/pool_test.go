package clientpool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/errclass"
)

// fakeClient stands in for an SDK client in the pure pool-logic tests; the
// transports are real in grpc_test.go and postgres_test.go.
type fakeClient struct {
	id     int64
	closed atomic.Int32
	// gone, when set, is closed by the first close: a call that ignores
	// its context waits on it, as a read on a connection does.
	gone chan struct{}
}

// fakes dials fakeClients and records every dial and close.
type fakes struct {
	dials   atomic.Int64
	failFor atomic.Int64 // fail this many dials first
	gate    chan struct{}
	mu      sync.Mutex
	// all holds every client dialled; guarded by mu.
	all []*fakeClient
}

var errDialRefused = errors.New("dial refused by test")

func (f *fakes) Dial(ctx context.Context, key string) (*fakeClient, error) {
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	n := f.dials.Add(1)
	if f.failFor.Add(-1) >= 0 {
		return nil, errDialRefused
	}
	c := &fakeClient{id: n, gone: make(chan struct{})}
	f.mu.Lock()
	f.all = append(f.all, c)
	f.mu.Unlock()
	return c, nil
}

func (f *fakes) Close(c *fakeClient) error {
	if c.closed.Add(1) == 1 && c.gone != nil {
		close(c.gone)
	}
	return nil
}

// closes returns how many times each dialled client was closed, by dial
// number.
func (f *fakes) closes() map[int64]int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int64]int32{}
	for _, c := range f.all {
		out[c.id] = c.closed.Load()
	}
	return out
}

var poolSeq atomic.Int64

func uniqueName(t *testing.T) string {
	return fmt.Sprintf("test-%d", poolSeq.Add(1))
}

func newFakePool(t *testing.T, f *fakes, mutate func(*clientpool.Options[string, *fakeClient])) *clientpool.Pool[string, *fakeClient] {
	t.Helper()
	o := clientpool.Options[string, *fakeClient]{Name: uniqueName(t), Dial: f, Close: f}
	if mutate != nil {
		mutate(&o)
	}
	p, err := clientpool.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// use runs one Do that returns err and reports which client it got.
func use(t *testing.T, ctx context.Context, p *clientpool.Pool[string, *fakeClient], key string, err error) int64 {
	t.Helper()
	var id int64
	got := p.Do(ctx, key, func(_ context.Context, c *fakeClient) error {
		id = c.id
		return err
	})
	if !errors.Is(got, err) {
		t.Fatalf("Do returned %v, want %v", got, err)
	}
	return id
}

var gr = schema.GroupResource{Group: "g1.test.finale.dev", Resource: "things"}

// TestDefaultPolicyByClass: a failing call evicts (the next Do gets a new
// client, the old one is closed) exactly for Transport, Auth and Identity.
func TestDefaultPolicyByClass(t *testing.T) {
	type result struct {
		NextClient  int64
		OldCloses   int32
		ClassCalled errclass.Class
	}
	cases := map[string]struct {
		err  error
		want result
	}{
		"success keeps":               {nil, result{1, 0, ""}},
		"grpc unavailable evicts":     {status.Error(codes.Unavailable, "x"), result{2, 1, errclass.Transport}},
		"own deadline evicts":         {context.DeadlineExceeded, result{2, 1, errclass.Transport}},
		"grpc unauthenticated evicts": {status.Error(codes.Unauthenticated, "x"), result{2, 1, errclass.Auth}},
		"k8s forbidden evicts":        {apierrors.NewForbidden(gr, "x", errors.New("rbac")), result{2, 1, errclass.Auth}},
		"server identity evicts":      {fmt.Errorf("dial: %w", errclass.ErrNoTLS), result{2, 1, errclass.Identity}},
		"not found keeps":             {status.Error(codes.NotFound, "x"), result{1, 0, errclass.NotFound}},
		"conflict keeps":              {apierrors.NewConflict(gr, "x", errors.New("changed")), result{1, 0, errclass.Conflict}},
		"invalid keeps":               {status.Error(codes.InvalidArgument, "x"), result{1, 0, errclass.Invalid}},
		"throttled keeps":             {status.Error(codes.ResourceExhausted, "x"), result{1, 0, errclass.Throttled}},
		"canceled keeps":              {context.Canceled, result{1, 0, errclass.Canceled}},
		"unknown keeps":               {errors.New("odd"), result{1, 0, errclass.Unknown}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakes{}
			p := newFakePool(t, f, nil)
			ctx := t.Context()
			if id := use(t, ctx, p, "k", tc.err); id != 1 {
				t.Fatalf("first call used client %d", id)
			}
			got := result{
				NextClient:  use(t, ctx, p, "k", nil),
				OldCloses:   f.closes()[1],
				ClassCalled: errclass.Of(ctx, tc.err),
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestPolicyOverride: the policy is one value; NeverEvict is the naive
// upstream pool, a custom policy can add classes.
func TestPolicyOverride(t *testing.T) {
	cases := map[string]struct {
		policy clientpool.Policy
		err    error
		want   int64 // client used by the next call
	}{
		"never evict keeps a transport failure": {clientpool.NeverEvict, context.DeadlineExceeded, 1},
		"custom policy evicts on throttling":    {clientpool.EvictOn(errclass.Throttled), status.Error(codes.ResourceExhausted, "x"), 2},
		"custom policy ignores transport":       {clientpool.EvictOn(errclass.Throttled), status.Error(codes.Unavailable, "x"), 1},
		"policy fn sees the error": {clientpool.PolicyFn(func(_ errclass.Class, err error) bool {
			return errors.Is(err, errDialRefused)
		}), fmt.Errorf("x: %w", errDialRefused), 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakes{}
			p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) { o.Policy = tc.policy })
			use(t, t.Context(), p, "k", tc.err)
			if diff := cmp.Diff(tc.want, use(t, t.Context(), p, "k", nil)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestCustomClassifier: the pool classifies with the classifier it is given.
func TestCustomClassifier(t *testing.T) {
	errSDKBroken := errors.New("sdk: channel is shut down")
	f := &fakes{}
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) {
		o.Classifier = errclass.New(func(_ context.Context, err error) (errclass.Class, bool) {
			return errclass.Transport, errors.Is(err, errSDKBroken)
		})
	})
	use(t, t.Context(), p, "k", errSDKBroken)
	if got := use(t, t.Context(), p, "k", nil); got != 2 {
		t.Errorf("after an SDK-specific transport error the next call used client %d, want 2", got)
	}
}

// TestCallerCanceledNeverEvicts: shutdown (the caller's context done) must
// not evict even though the call's error is a deadline.
func TestCallerCanceledNeverEvicts(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, nil)
	use(t, t.Context(), p, "k", nil)
	ctx, cancel := context.WithCancel(t.Context())
	err := p.Do(ctx, "k", func(context.Context, *fakeClient) error {
		cancel()
		return fmt.Errorf("rpc: %w", context.DeadlineExceeded)
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do: %v", err)
	}
	if got := use(t, t.Context(), p, "k", nil); got != 1 {
		t.Errorf("after a cancelled caller the next call used client %d, want 1 (kept)", got)
	}
}

// errReconcileTimeout stands for controller-runtime's ReconciliationTimeout
// cause on the caller's context.
var errReconcileTimeout = errors.New("reconciliation timeout")

// TestCallerDeadlineVersusCallTimeout: a hung call evicts whichever of the
// caller's deadline and CallTimeout is nearer, because the pool's own bound
// fires first (its cause is errclass.ErrCallTimeout); a caller that gives
// up (cancelled, shutting down, out of time before the call) never evicts.
// Before the fix, a caller deadline shorter than CallTimeout
// made every hang Canceled.
func TestCallerDeadlineVersusCallTimeout(t *testing.T) {
	// hang never answers; cancelCaller, when set, is called first.
	hang := func(cancelCaller context.CancelFunc) func(ctx context.Context, _ *fakeClient) error {
		return func(ctx context.Context, _ *fakeClient) error {
			if cancelCaller != nil {
				cancelCaller()
			}
			<-ctx.Done()
			return fmt.Errorf("rpc: %w", ctx.Err())
		}
	}
	type result struct {
		Evicted  bool
		OwnBound bool // fn's context ended by the pool's bound
	}
	cases := map[string]struct {
		callTimeout time.Duration
		// caller makes the caller's context; its cancel is passed to fn
		// when cancelInCall.
		caller       func(context.Context) (context.Context, context.CancelFunc)
		cancelInCall bool
		want         result
	}{
		"no caller deadline, CallTimeout fires": {
			callTimeout: 50 * time.Millisecond,
			caller:      context.WithCancel,
			want:        result{Evicted: true, OwnBound: true},
		},
		"caller deadline longer than CallTimeout": {
			callTimeout: 50 * time.Millisecond,
			caller: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeoutCause(ctx, time.Minute, errReconcileTimeout)
			},
			want: result{Evicted: true, OwnBound: true},
		},
		"reconcile timeout shorter than CallTimeout": {
			callTimeout: time.Minute,
			caller: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeoutCause(ctx, 500*time.Millisecond, errReconcileTimeout)
			},
			want: result{Evicted: true, OwnBound: true},
		},
		"caller deadline without a cause shorter than CallTimeout": {
			callTimeout: time.Minute,
			caller: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 500*time.Millisecond)
			},
			want: result{Evicted: true, OwnBound: true},
		},
		"shutdown during the call": {
			callTimeout:  time.Minute,
			caller:       context.WithCancel,
			cancelInCall: true,
			want:         result{},
		},
		"cancelled during the call, under a short deadline": {
			callTimeout: time.Minute,
			caller: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeoutCause(ctx, 10*time.Second, errReconcileTimeout)
			},
			cancelInCall: true,
			want:         result{},
		},
		"caller out of time before the call": {
			callTimeout: time.Minute,
			caller: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithDeadlineCause(ctx, time.Unix(0, 0), errReconcileTimeout)
			},
			want: result{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := &fakes{}
			p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = tc.callTimeout })
			use(t, t.Context(), p, "k", nil) // client 1 cached
			ctx, cancel := tc.caller(t.Context())
			defer cancel()
			var inCall context.CancelFunc
			if tc.cancelInCall {
				inCall = cancel
			}
			// On a loaded machine the hung call may return after its grace,
			// when Do has already abandoned it: own is read only once fn
			// has returned.
			var own atomic.Bool
			called, returned := make(chan struct{}), make(chan struct{})
			err := p.Do(ctx, "k", func(ctx context.Context, c *fakeClient) error {
				close(called)
				defer close(returned)
				err := hang(inCall)(ctx, c)
				own.Store(errors.Is(context.Cause(ctx), errclass.ErrCallTimeout))
				return err
			})
			if err == nil {
				t.Fatal("a hung call succeeded")
			}
			select {
			case <-called:
				select {
				case <-returned:
				case <-time.After(time.Minute):
					t.Fatal("the hung call did not return within a minute of its context's end")
				}
			default: // refused before the call
			}
			got := result{Evicted: use(t, t.Context(), p, "k", nil) != 1, OwnBound: own.Load()}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestCallTimeoutEvicts: a call that hangs past CallTimeout, with the caller
// still live, is the seed's poisoned client; it evicts.
func TestCallTimeoutEvicts(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = 20 * time.Millisecond })
	err := p.Do(t.Context(), "k", func(ctx context.Context, _ *fakeClient) error {
		<-ctx.Done() // a client that never answers
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do: got %v, want deadline exceeded", err)
	}
	if got := use(t, t.Context(), p, "k", nil); got != 2 {
		t.Errorf("next call used client %d, want 2 (fresh dial)", got)
	}
	// Under load the call can outlast its grace and be abandoned, and an
	// abandoned call's client is closed in the background: wait for it.
	want, got := map[int64]int32{1: 1, 2: 0}, map[int64]int32(nil)
	if err := controlplane.WaitFor(t.Context(), seedWait, "the evicted client closed", func(context.Context) (bool, error) {
		got = f.closes()
		return cmp.Equal(want, got), nil
	}); err != nil {
		t.Errorf("closes (-want +got):\n%s", cmp.Diff(want, got))
	}
}

func TestFailedDialNotCached(t *testing.T) {
	f := &fakes{}
	f.failFor.Store(1)
	p := newFakePool(t, f, nil)
	err := p.Do(t.Context(), "k", func(context.Context, *fakeClient) error {
		t.Error("fn ran without a client")
		return nil
	})
	if !errors.Is(err, errDialRefused) {
		t.Fatalf("Do: got %v, want the dial error", err)
	}
	if got := use(t, t.Context(), p, "k", nil); got != 2 {
		t.Errorf("after a failed dial the next call used client %d, want 2 (dialled again)", got)
	}
	if got := p.Len(); got != 1 {
		t.Errorf("Len: got %d, want 1", got)
	}
}

// TestConcurrentDoDialsOnce: 100 callers of one key, the dial held until
// all have started, produce exactly one dial.
func TestConcurrentDoDialsOnce(t *testing.T) {
	f := &fakes{gate: make(chan struct{})}
	p := newFakePool(t, f, nil)
	const n = 100
	var started, wg sync.WaitGroup
	started.Add(n)
	wg.Add(n)
	ids := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		go func() {
			defer wg.Done()
			started.Done()
			errs[i] = p.Do(t.Context(), "k", func(_ context.Context, c *fakeClient) error {
				ids[i] = c.id
				return nil
			})
		}()
	}
	started.Wait()
	close(f.gate)
	wg.Wait()
	if got := f.dials.Load(); got != 1 {
		t.Errorf("dials: got %d, want 1", got)
	}
	for i := range n {
		if errs[i] != nil || ids[i] != 1 {
			t.Fatalf("caller %d: client %d, err %v", i, ids[i], errs[i])
		}
	}
}

// TestWaiterGivesUpWithoutFailingOthers: the dial is shared and detached, so
// a caller whose context ends while waiting does not fail the dial.
func TestWaiterGivesUpWithoutFailingOthers(t *testing.T) {
	f := &fakes{gate: make(chan struct{})}
	p := newFakePool(t, f, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Do(ctx, "k", func(context.Context, *fakeClient) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: got %v", err)
	}
	close(f.gate)
	if got := use(t, t.Context(), p, "k", nil); got != 1 {
		t.Errorf("got client %d, want 1 (the first dial, completed after its starter left)", got)
	}
}

// TestEvictedClientClosedAfterInFlightCalls: eviction while another call
// still uses the client defers the close until that call returns.
func TestEvictedClientClosedAfterInFlightCalls(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, nil)
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- p.Do(t.Context(), "k", func(context.Context, *fakeClient) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	use(t, t.Context(), p, "k", status.Error(codes.Unavailable, "x"))
	if diff := cmp.Diff(map[int64]int32{1: 0}, f.closes()); diff != "" {
		t.Fatalf("closed while in use (-want +got):\n%s", diff)
	}
	if got := use(t, t.Context(), p, "k", nil); got != 2 {
		t.Fatalf("next call used client %d, want 2", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int64]int32{1: 1, 2: 0}, f.closes()); diff != "" {
		t.Errorf("closes after the in-flight call returned (-want +got):\n%s", diff)
	}
}

func TestPanicInFnReleasesClient(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, nil)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = p.Do(t.Context(), "k", func(context.Context, *fakeClient) error { panic("boom") })
	}()
	if !p.Evict("k") {
		t.Fatal("Evict: no client")
	}
	if diff := cmp.Diff(map[int64]int32{1: 1}, f.closes()); diff != "" {
		t.Errorf("a panicked call pinned its client (-want +got):\n%s", diff)
	}
}

func TestMaxAgeAndIdleTimeout(t *testing.T) {
	start := time.Date(2026, 5, 21, 11, 14, 55, 0, time.UTC)
	cases := map[string]struct {
		maxAge, idle time.Duration
		steps        []time.Duration // clock step before each call
		want         []int64         // client each call used
	}{
		"max age replaces a busy client": {
			maxAge: time.Minute, steps: []time.Duration{0, 30 * time.Second, 29 * time.Second, time.Second}, want: []int64{1, 1, 1, 2},
		},
		"idle timeout replaces an unused client": {
			idle: time.Minute, steps: []time.Duration{0, 59 * time.Second, 59 * time.Second, time.Minute}, want: []int64{1, 1, 1, 2},
		},
		"neither: kept forever": {
			steps: []time.Duration{0, time.Hour, 24 * time.Hour}, want: []int64{1, 1, 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(start)
			f := &fakes{}
			p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) {
				o.Clock, o.MaxAge, o.IdleTimeout = clk, tc.maxAge, tc.idle
			})
			var got []int64
			for _, d := range tc.steps {
				clk.SetTime(clk.Now().Add(d))
				got = append(got, use(t, t.Context(), p, "k", nil))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("clients used (-want +got):\n%s", diff)
			}
			for id, n := range f.closes() {
				if wantClosed := id < int64(len(f.all)); (n == 1) != wantClosed || n > 1 {
					t.Errorf("client %d closed %d times", id, n)
				}
			}
		})
	}
}

func TestSweepClosesIdleClients(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	f := &fakes{}
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) {
		o.Clock, o.IdleTimeout = clk, time.Minute
	})
	use(t, t.Context(), p, "a", nil)
	clk.SetTime(clk.Now().Add(30 * time.Second))
	use(t, t.Context(), p, "b", nil)
	clk.SetTime(clk.Now().Add(30 * time.Second))
	if got := p.Sweep(); got != 1 {
		t.Fatalf("Sweep retired %d, want 1 (only a is idle a minute)", got)
	}
	if diff := cmp.Diff(map[int64]int32{1: 1, 2: 0}, f.closes()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestEvictAndClose(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, nil)
	use(t, t.Context(), p, "a", nil)
	use(t, t.Context(), p, "b", nil)
	if p.Evict("missing") {
		t.Error("Evict of a missing key reported true")
	}
	if !p.Evict("a") {
		t.Error("Evict(a) reported false")
	}
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- p.Do(t.Context(), "c", func(context.Context, *fakeClient) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int64]int32{1: 1, 2: 1, 3: 0}, f.closes()); diff != "" {
		t.Errorf("after Close, in-use client must stay open (-want +got):\n%s", diff)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int64]int32{1: 1, 2: 1, 3: 1}, f.closes()); diff != "" {
		t.Errorf("after the last call, everything closed once (-want +got):\n%s", diff)
	}
	if err := p.Do(t.Context(), "a", func(context.Context, *fakeClient) error { return nil }); !errors.Is(err, clientpool.ErrClosed) {
		t.Errorf("Do after Close: got %v, want ErrClosed", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	f := &fakes{}
	cases := map[string]clientpool.Options[string, *fakeClient]{
		"no dial":          {},
		"negative max age": {Dial: f, MaxAge: -time.Second},
		"negative timeout": {Dial: f, CallTimeout: -1},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := clientpool.New(o); err == nil {
				t.Error("New accepted bad options")
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	f := &fakes{}
	f.failFor.Store(1)
	var name string
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) { name = o.Name })
	_ = p.Do(t.Context(), "k", func(context.Context, *fakeClient) error { return nil })
	use(t, t.Context(), p, "k", nil)
	use(t, t.Context(), p, "k", status.Error(codes.NotFound, "x"))
	use(t, t.Context(), p, "k", status.Error(codes.Unavailable, "x"))
	use(t, t.Context(), p, "k", nil)

	got := map[string]float64{
		"clients":             metricValue(t, "finale_clientpool_clients", name),
		"dials success":       metricValue(t, "finale_clientpool_dials_total", name, "success"),
		"dials error":         metricValue(t, "finale_clientpool_dials_total", name, "error"),
		"evictions Transport": metricValue(t, "finale_clientpool_evictions_total", name, "Transport"),
		"calls OK":            metricValue(t, "finale_clientpool_calls_total", name, "OK"),
		"calls NotFound":      metricValue(t, "finale_clientpool_calls_total", name, "NotFound"),
		"calls Transport":     metricValue(t, "finale_clientpool_calls_total", name, "Transport"),
		"closes success":      metricValue(t, "finale_clientpool_closes_total", name, "success"),
	}
	want := map[string]float64{
		"clients": 1, "dials success": 2, "dials error": 1, "evictions Transport": 1,
		"calls OK": 2, "calls NotFound": 1, "calls Transport": 1, "closes success": 1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// metricValue reads one series from controller-runtime's registry, where
// the pool registers; labels are matched in order after "pool".
func metricValue(t *testing.T, name, pool string, labels ...string) float64 {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, pool, labels) {
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, pool string, labels []string) bool {
	vals := map[string]string{}
	for _, lp := range m.GetLabel() {
		vals[lp.GetName()] = lp.GetValue()
	}
	if vals["pool"] != pool {
		return false
	}
	var rest []string
	for _, lp := range m.GetLabel() {
		if lp.GetName() != "pool" {
			rest = append(rest, lp.GetValue())
		}
	}
	return cmp.Equal(labels, rest)
}

// TestNoLeakUnderChurn: concurrent calls on a few keys, failing at random
// with evicting and non-evicting errors, concurrent Evicts, then Close:
// every client ever dialled is closed exactly once, none while in use.
func TestNoLeakUnderChurn(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, nil)
	answers := []error{nil, nil, status.Error(codes.Unavailable, "x"), status.Error(codes.NotFound, "x"), status.Error(codes.Unauthenticated, "x")}
	keys := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	var usedClosed atomic.Int64
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				key := keys[(g+i)%len(keys)]
				if i%37 == 0 {
					p.Evict(key)
					continue
				}
				_ = p.Do(t.Context(), key, func(_ context.Context, c *fakeClient) error {
					if c.closed.Load() != 0 {
						usedClosed.Add(1)
					}
					return answers[(g*7+i)%len(answers)]
				})
			}
		}()
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := usedClosed.Load(); got != 0 {
		t.Errorf("%d calls ran on a closed client", got)
	}
	for id, n := range f.closes() {
		if n != 1 {
			t.Errorf("client %d closed %d times, want 1", id, n)
		}
	}
	if f.dials.Load() < 2 {
		t.Errorf("only %d dials: the churn did not evict", f.dials.Load())
	}
}

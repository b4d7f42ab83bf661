package clientpool_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
)

// testFence is a Fence the test moves; seq, when set, answers the calls
// to Until in turn (the last answer repeats).
type testFence struct {
	mu    sync.Mutex
	until time.Time
	seq   []time.Time
}

func (f *testFence) Until() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seq) > 0 {
		u := f.seq[0]
		if len(f.seq) > 1 {
			f.seq = f.seq[1:]
		}
		return u
	}
	return f.until
}

func (f *testFence) set(u time.Time) {
	f.mu.Lock()
	f.until = u
	f.mu.Unlock()
}

var fenceT0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func fencedPool(t *testing.T, f *fakes, fence clientpool.Fence, clk *clocktesting.FakeClock, mutate func(*clientpool.Options[string, *fakeClient])) *clientpool.Pool[string, *fakeClient] {
	return newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) {
		o.Fence, o.Clock = fence, clk
		if mutate != nil {
			mutate(o)
		}
	})
}

// No call starts, and no client is dialled, once the fence has passed or
// while no lease is held; a cached client stays cached.
func TestFenceRefusesToStart(t *testing.T) {
	cases := map[string]struct {
		until time.Time
		want  bool // the call ran
	}{
		"no lease held":        {until: time.Time{}},
		"fence passed":         {until: fenceT0.Add(-time.Nanosecond)},
		"fence passes now":     {until: fenceT0},
		"fence a moment ahead": {until: fenceT0.Add(time.Millisecond), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(fenceT0)
			fence := &testFence{until: fenceT0.Add(time.Hour)}
			f := &fakes{}
			p := fencedPool(t, f, fence, clk, nil)
			use(t, t.Context(), p, "k", nil) // a cached client
			fence.set(tc.until)
			ran := false
			err := p.Do(t.Context(), "k", func(context.Context, *fakeClient) error { ran = true; return nil })
			if ran != tc.want {
				t.Fatalf("call ran = %v, want %v (err %v)", ran, tc.want, err)
			}
			if !tc.want && !errors.Is(err, clientpool.ErrFenced) {
				t.Fatalf("Do = %v, want ErrFenced", err)
			}
			if got := f.dials.Load(); got != 1 || p.Len() != 1 {
				t.Fatalf("dials %d, cached %d; want the one client kept and nothing dialled", got, p.Len())
			}
			// Refused on a key with no client: no dial either.
			if err := p.Do(t.Context(), "other", func(context.Context, *fakeClient) error { return nil }); !tc.want && !errors.Is(err, clientpool.ErrFenced) {
				t.Fatalf("Do on a new key = %v, want ErrFenced", err)
			}
			if got := f.dials.Load(); !tc.want && got != 1 {
				t.Fatalf("a refused call dialled (%d dials)", got)
			}
		})
	}
}

// Each call's context ends at the fence: its deadline is the fence when
// that is nearer than the caller's and the call timeout, and not otherwise.
func TestFenceCapsTheCallDeadline(t *testing.T) {
	cases := map[string]struct {
		fence, caller, callTimeout time.Duration // from now; 0 is none
		want                       time.Duration // the deadline fn sees, from now
	}{
		"fence alone":                  {fence: time.Hour, want: time.Hour},
		"fence nearer than the caller": {fence: time.Minute, caller: time.Hour, want: time.Minute},
		"caller nearer than the fence": {fence: time.Hour, caller: time.Minute, want: time.Minute},
		"fence nearer than the bound":  {fence: time.Minute, callTimeout: time.Hour, want: time.Minute},
		"bound nearer than the fence":  {fence: time.Hour, callTimeout: time.Minute, want: time.Minute},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// The real clock: the deadline is a real-time timer.
			now := time.Now()
			fence := &testFence{until: now.Add(tc.fence)}
			p := newFakePool(t, &fakes{}, func(o *clientpool.Options[string, *fakeClient]) {
				o.Fence, o.CallTimeout = fence, tc.callTimeout
			})
			ctx := t.Context()
			if tc.caller > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, now.Add(tc.caller))
				defer cancel()
			}
			var got time.Time
			if err := p.Do(ctx, "k", func(ctx context.Context, _ *fakeClient) error {
				got, _ = ctx.Deadline()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			// The caller's share (nine tenths) applies under a caller
			// deadline; compare to the second.
			if d := got.Sub(now.Add(tc.want)); d > time.Second || d < -tc.want/10-time.Second {
				t.Fatalf("fn's deadline is %v from now, want about %v", got.Sub(now), tc.want)
			}
		})
	}
}

// A call running when the fence passes sees its context end as soon as it
// checks it, before any timer fires (a process waking from a pause), with
// cause ErrFenced; its error wraps ErrFenced and fn's, and the client is
// kept whatever fn's error was.
func TestFencePassingDuringACall(t *testing.T) {
	transport := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	clk := clocktesting.NewFakeClock(fenceT0)
	fence := &testFence{until: fenceT0.Add(time.Second)}
	f := &fakes{}
	p := fencedPool(t, f, fence, clk, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = time.Hour })
	type seen struct {
		ErrBefore, ErrAfter bool
		Cause               string
	}
	var got seen
	err := p.Do(t.Context(), "k", func(ctx context.Context, _ *fakeClient) error {
		got.ErrBefore = ctx.Err() != nil
		clk.Step(2 * time.Second) // the process slept past its fence
		select {
		case <-ctx.Done():
			got.ErrAfter = true
		default:
		}
		if c := context.Cause(ctx); c != nil {
			got.Cause = c.Error()
		}
		return transport // what the client says when its context ends mid-read
	})
	if diff := cmp.Diff(seen{ErrAfter: true, Cause: clientpool.ErrFenced.Error()}, got); diff != "" {
		t.Fatalf("fn's context (-want +got):\n%s", diff)
	}
	if !errors.Is(err, clientpool.ErrFenced) || !errors.Is(err, transport) {
		t.Fatalf("Do = %v, want ErrFenced wrapping fn's error", err)
	}
	if p.Len() != 1 {
		t.Fatal("a call the fence ended evicted its client")
	}
	fence.set(clk.Now().Add(time.Hour))
	if id := use(t, t.Context(), p, "k", nil); id != 1 {
		t.Fatalf("after a new renewal the call got client %d, want the kept client 1", id)
	}
}

// On the real clock: a call that hangs past the fence is ended there, not
// by a call timeout fitted under it, so it reads as the replica stepping
// back (Canceled), never as a hung client.
func TestFenceEndsAHungCallWithoutEviction(t *testing.T) {
	fence := &testFence{until: time.Now().Add(200 * time.Millisecond)}
	classes := make(chan errclass.Class, 1)
	p := newFakePool(t, &fakes{}, func(o *clientpool.Options[string, *fakeClient]) {
		o.Fence, o.CallTimeout = fence, time.Hour
		o.Policy = clientpool.PolicyFn(func(c errclass.Class, _ error) bool { classes <- c; return true })
	})
	err := p.Do(t.Context(), "k", func(ctx context.Context, _ *fakeClient) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, clientpool.ErrFenced) {
		t.Fatalf("Do = %v, want ErrFenced", err)
	}
	select {
	case c := <-classes:
		t.Fatalf("the eviction policy was asked (class %s) about a call the fence ended", c)
	default:
	}
	if p.Len() != 1 {
		t.Fatal("the client was evicted")
	}
	if c := errclass.New(clientpool.ClassifyFenced).Classify(t.Context(), err); c != errclass.Canceled {
		t.Fatalf("ClassifyFenced gives %s, want Canceled", c)
	}
}

// A dial that starts after the fence passed (the fence was read ahead of
// it by Do) is not attempted; a dial that starts before it runs under a
// context that ends at the fence.
func TestFenceBoundsDials(t *testing.T) {
	clk := clocktesting.NewFakeClock(fenceT0)
	// Do reads the fence first (valid), the dial reads it next (passed).
	fence := &testFence{seq: []time.Time{fenceT0.Add(time.Second), {}}}
	f := &fakes{}
	p := fencedPool(t, f, fence, clk, nil)
	err := p.Do(t.Context(), "k", func(context.Context, *fakeClient) error { return nil })
	if !errors.Is(err, clientpool.ErrFenced) || f.dials.Load() != 0 {
		t.Fatalf("Do = %v with %d dials; want ErrFenced and no dial", err, f.dials.Load())
	}

	until := time.Now().Add(time.Hour)
	var deadline time.Time
	p2 := newFakePool(t, &fakes{}, func(o *clientpool.Options[string, *fakeClient]) {
		o.Fence = &testFence{until: until}
		o.DialTimeout = 2 * time.Hour
		o.Dial = clientpool.DialFn[string, *fakeClient](func(ctx context.Context, _ string) (*fakeClient, error) {
			deadline, _ = ctx.Deadline()
			return &fakeClient{}, nil
		})
	})
	if err := p2.Do(t.Context(), "k", func(context.Context, *fakeClient) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if d := deadline.Sub(until); d > time.Second || d < -time.Second {
		t.Fatalf("the dial's deadline is %v from the fence, want the fence", d)
	}
}

// The fence is checked again once the client is there, right before the
// call: getting the client may have waited for a dial (up to DialTimeout),
// during which the fence may pass. Before the fix, fn ran after
// the fence had passed and Do reported success. A renewal during the dial
// lets the call go ahead.
func TestFenceCheckedAgainAfterTheDial(t *testing.T) {
	cases := map[string]struct {
		during time.Duration // how far the fence moves during the dial; 0: it stays
		step   time.Duration // clock step during the dial
		want   bool          // the call ran
	}{
		"fence passes during the dial":   {step: 2 * time.Second},
		"fence renewed during the dial":  {step: 2 * time.Second, during: time.Hour, want: true},
		"fence holds through the dial":   {step: 500 * time.Millisecond, want: true},
		"fence passes as the dial lands": {step: time.Second},
	}
	calls := map[string]func(*testing.T) func(*clientpool.Pool[string, *fakeClient], *bool) error{
		"Do": func(t *testing.T) func(*clientpool.Pool[string, *fakeClient], *bool) error {
			return func(p *clientpool.Pool[string, *fakeClient], ran *bool) error {
				return p.Do(t.Context(), "k", func(context.Context, *fakeClient) error { *ran = true; return nil })
			}
		},
		"lease": func(t *testing.T) func(*clientpool.Pool[string, *fakeClient], *bool) error {
			return func(p *clientpool.Pool[string, *fakeClient], ran *bool) error {
				return leased(t.Context(), p, "k", func(context.Context, *fakeClient) error { *ran = true; return nil })
			}
		},
	}
	for name, tc := range cases {
		for via, call := range calls {
			t.Run(name+" "+via, func(t *testing.T) {
				ran, err := fenceDuringDial(t, tc.step, tc.during, call(t))
				if ran != tc.want || (!tc.want && !errors.Is(err, clientpool.ErrFenced)) || (tc.want && err != nil) {
					t.Fatalf("call ran = %v, error %v; want ran = %v, ErrFenced unless it ran", ran, err, tc.want)
				}
			})
		}
	}
}

// fenceDuringDial runs call on a fenced pool (fence one second ahead)
// whose first dial waits until the test has stepped the clock by step and
// moved the fence by during (when set). It reports whether the call ran,
// its error, and checks the dialled client was kept.
func fenceDuringDial(t *testing.T, step, during time.Duration, call func(*clientpool.Pool[string, *fakeClient], *bool) error) (bool, error) {
	t.Helper()
	clk := clocktesting.NewFakeClock(fenceT0)
	fence := &testFence{until: fenceT0.Add(time.Second)}
	dialing, gate := make(chan struct{}), make(chan struct{})
	f := &fakes{}
	p := fencedPool(t, f, fence, clk, func(o *clientpool.Options[string, *fakeClient]) {
		o.Dial = clientpool.DialFn[string, *fakeClient](func(ctx context.Context, key string) (*fakeClient, error) {
			close(dialing)
			<-gate // a slow dial that does not look at its context
			return f.Dial(ctx, key)
		})
	})
	var ran bool
	errc := make(chan error, 1)
	go func() { errc <- call(p, &ran) }()
	<-dialing
	clk.Step(step)
	if during > 0 {
		fence.set(fenceT0.Add(during))
	}
	close(gate)
	err := <-errc
	if p.Len() != 1 || f.dials.Load() != 1 {
		t.Fatalf("cached %d clients after %d dials; want the dialled client kept", p.Len(), f.dials.Load())
	}
	return ran, err
}

// A call whose body returns nil at or after the fence (it ignored its
// context, or its bound fired before the fence and it answered late) may
// have written after another replica could lead: Do and Release report it
// as fenced (ErrFenced, counted in finale_clientpool_fenced_total, the
// client kept), never as success. Before, Do returned
// nil.
func TestFenceReportsALateSuccess(t *testing.T) {
	cases := map[string]struct {
		callTimeout time.Duration
		// waitBound: the body waits for its context to end at the pool's
		// bound (real time, before the fence) before it writes.
		waitBound bool
	}{
		"context ignored, unbounded pool": {},
		"context ignored, bounded pool":   {callTimeout: time.Hour},
		// The grace after a 4s bound is 200ms: room for the body's return
		// on a loaded machine, so that the call is not abandoned.
		"the bound fired before the fence": {callTimeout: 4 * time.Second, waitBound: true},
	}
	for name, tc := range cases {
		for _, via := range []string{"do", "lease"} {
			t.Run(name+" "+via, func(t *testing.T) {
				t.Parallel()
				clk := clocktesting.NewFakeClock(fenceT0)
				fence := &testFence{until: fenceT0.Add(time.Hour)}
				f := &fakes{}
				var pool string
				p := fencedPool(t, f, fence, clk, func(o *clientpool.Options[string, *fakeClient]) {
					o.CallTimeout, pool = tc.callTimeout, o.Name
				})
				body := func(ctx context.Context, _ *fakeClient) error {
					if tc.waitBound {
						<-ctx.Done()
						if !errors.Is(context.Cause(ctx), errclass.ErrCallTimeout) {
							return errors.New("the context ended otherwise than at the bound")
						}
					}
					clk.Step(2 * time.Hour) // the fence passes; the write lands now
					return nil
				}
				var err error
				if via == "do" {
					err = p.Do(t.Context(), "k", body)
				} else {
					err = leased(t.Context(), p, "k", body)
				}
				if !errors.Is(err, clientpool.ErrFenced) || errors.Is(err, errclass.ErrCallTimeout) {
					t.Fatalf("%s = %v, want ErrFenced (not abandoned)", via, err)
				}
				if c := errclass.New(clientpool.ClassifyFenced).Classify(t.Context(), err); c != errclass.Canceled {
					t.Errorf("ClassifyFenced gives %s, want Canceled", c)
				}
				got := map[string]float64{
					"fenced":   metricValue(t, "finale_clientpool_fenced_total", pool),
					"calls OK": metricValue(t, "finale_clientpool_calls_total", pool, "OK"),
					"cached":   float64(p.Len()),
				}
				want := map[string]float64{"fenced": 1, "calls OK": 0, "cached": 1}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			})
		}
	}
}

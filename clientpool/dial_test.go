package clientpool_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/finale-dev/finale/clientpool"
)

// TestCallersOwnDial: DoWith and AcquireWith dial with the caller's
// function (arguments in its closure, no context values) only when the key
// has no client; a nil dial is Options.Dial.
func TestCallersOwnDial(t *testing.T) {
	f := &fakes{}
	p := newFakePool(t, f, nil)
	var called []string
	dialWith := func(arg string) clientpool.DialedFn[string, *fakeClient] {
		return func(ctx context.Context, key string) (clientpool.Dialed[*fakeClient], error) {
			called = append(called, key+":"+arg)
			c, err := f.Dial(ctx, key)
			return clientpool.Dialed[*fakeClient]{Client: c}, err
		}
	}
	got := map[string]int64{}
	record := func(name string) func(context.Context, *fakeClient) error {
		return func(_ context.Context, c *fakeClient) error { got[name] = c.id; return nil }
	}
	if err := p.DoWith(t.Context(), "a", dialWith("cert-1"), record("a first")); err != nil {
		t.Fatal(err)
	}
	if err := p.DoWith(t.Context(), "a", dialWith("cert-2"), record("a cached")); err != nil {
		t.Fatal(err)
	}
	lease, err := p.AcquireWith(t.Context(), "b", dialWith("cert-3"))
	if err != nil {
		t.Fatal(err)
	}
	got["b lease"] = lease.Client().id
	lease.Release(nil)
	if err := p.DoWith(t.Context(), "c", nil, record("c default dial")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a:cert-1", "b:cert-3"}, called); diff != "" {
		t.Errorf("the caller's dials (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"a first": 1, "a cached": 1, "b lease": 2, "c default dial": 3}, got); diff != "" {
		t.Errorf("clients (-want +got):\n%s", diff)
	}
}

// TestDialError: a failed dial is a *DialError naming the pool and key,
// with the message of before, through which errors.Is sees the cause.
func TestDialError(t *testing.T) {
	f := &fakes{}
	f.failFor.Store(2)
	var name string
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) { name = o.Name })
	for _, via := range []string{"do", "acquire"} {
		var err error
		if via == "do" {
			err = p.Do(t.Context(), "k", func(context.Context, *fakeClient) error { return nil })
		} else {
			_, err = p.Acquire(t.Context(), "k")
		}
		var de *clientpool.DialError
		if !errors.As(err, &de) {
			t.Fatalf("%s: %v is not a *DialError", via, err)
		}
		if diff := cmp.Diff(clientpool.DialError{Pool: name, Key: "k", Err: errDialRefused}, *de, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
			t.Errorf("%s (-want +got):\n%s", via, diff)
		}
		if want := "clientpool " + name + ": dial k: dial refused by test"; err.Error() != want || !errors.Is(err, errDialRefused) {
			t.Errorf("%s: %q, want %q wrapping the dial's error", via, err, want)
		}
	}
}

// TestNotAfter: a client whose dial said NotAfter is retired at that time
// on the pool's clock (checked at use and by Sweep, reason NotAfter) and
// closed once; a dial whose client has expired already fails.
func TestNotAfter(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	f := &fakes{}
	var notAfter atomic.Pointer[time.Time]
	var name string
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) {
		o.Clock, name = clk, o.Name
		o.Dial = clientpool.DialedFn[string, *fakeClient](func(ctx context.Context, key string) (clientpool.Dialed[*fakeClient], error) {
			c, err := f.Dial(ctx, key)
			return clientpool.Dialed[*fakeClient]{Client: c, NotAfter: *notAfter.Load()}, err
		})
	})
	expiry := t0.Add(time.Hour) // a certificate's NotAfter
	notAfter.Store(&expiry)
	var got []int64
	for _, step := range []time.Duration{0, time.Hour - time.Nanosecond, time.Nanosecond} {
		clk.SetTime(clk.Now().Add(step))
		got = append(got, use(t, t.Context(), p, "k", nil))
		next := expiry.Add(time.Hour) // the renewed certificate's
		notAfter.Store(&next)
	}
	if diff := cmp.Diff([]int64{1, 1, 2}, got); diff != "" {
		t.Errorf("clients used before, just before and at NotAfter (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int64]int32{1: 1, 2: 0}, f.closes()); diff != "" {
		t.Errorf("closes at the first NotAfter (-want +got):\n%s", diff)
	}
	// Unused past its NotAfter: Sweep retires it.
	clk.SetTime(expiry.Add(time.Hour))
	if n := p.Sweep(); n != 1 {
		t.Errorf("Sweep retired %d, want the expired client", n)
	}
	if diff := cmp.Diff(map[int64]int32{1: 1, 2: 1}, f.closes()); diff != "" {
		t.Errorf("closes after Sweep (-want +got):\n%s", diff)
	}
	if got := metricValue(t, "finale_clientpool_evictions_total", name, "NotAfter"); got != 2 {
		t.Errorf("NotAfter evictions %v, want 2", got)
	}

	passed := clk.Now() // expired as it is made
	notAfter.Store(&passed)
	err := p.Do(t.Context(), "k", func(context.Context, *fakeClient) error {
		t.Error("called with an expired client")
		return nil
	})
	var de *clientpool.DialError
	if !errors.As(err, &de) {
		t.Fatalf("Do = %v, want a *DialError", err)
	}
	if n := f.closes()[3]; n != 1 || p.Len() != 0 {
		t.Errorf("the expired client was closed %d times and %d cached; want closed and not cached", n, p.Len())
	}
}

// TestPut: a client put is what the next call gets, owned by the pool
// (closed when replaced, evicted or at Close); Put after Close refuses.
func TestPut(t *testing.T) {
	f := &fakes{}
	var closed []string
	p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) {
		o.Close = clientpool.CloseFunc[*fakeClient](func(c *fakeClient) { // a close that cannot fail
			closed = append(closed, map[int64]string{-1: "seeded", -2: "replacement", 1: "dialled"}[c.id])
		})
	})
	seeded := &fakeClient{id: -1}
	if err := p.Put("k", seeded); err != nil {
		t.Fatal(err)
	}
	if got := use(t, t.Context(), p, "k", nil); got != -1 {
		t.Fatalf("the call got client %d, want the seeded one", got)
	}
	lease, err := p.Acquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Put("k", &fakeClient{id: -2}); err != nil { // while the seeded one is in use
		t.Fatal(err)
	}
	if len(closed) != 0 {
		t.Fatalf("closed %v while in use", closed)
	}
	lease.Release(nil)
	if got := use(t, t.Context(), p, "k", errDialRefused); got != -2 {
		t.Fatalf("after the second Put the call got client %d, want the replacement", got)
	}
	p.Evict("k")
	use(t, t.Context(), p, "k", nil)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"seeded", "replacement", "dialled"}, closed); diff != "" {
		t.Errorf("closed (-want +got):\n%s", diff)
	}
	if err := p.Put("k", &fakeClient{id: -3}); !errors.Is(err, clientpool.ErrClosed) {
		t.Errorf("Put after Close = %v, want ErrClosed", err)
	}
}

package clientpool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
)

// serialClient is a lineClient whose calls take turns on one connection
// and whose Close waits for the call in flight, as a pgx.Conn behind a
// mutex does (examples/postgres Conn) and as some gRPC and SDK clients'
// graceful closes do: closing it does not end a stuck read.
type serialClient struct {
	mu sync.Mutex // held for a whole call, and by Close
	*lineClient
}

func (c *serialClient) Call(req string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lineClient.Call(req)
}

// startSerialStack is a frozenStack of serialClients.
func startSerialStack(t *testing.T, callTimeout time.Duration) *frozenStack[*serialClient] {
	t.Helper()
	return startFrozenStack(t, callTimeout, func(f *lineClients) (clientpool.Dialer[string, *serialClient], clientpool.Closer[*serialClient]) {
		dial := clientpool.DialFn[string, *serialClient](func(ctx context.Context, key string) (*serialClient, error) {
			c, err := f.Dial(ctx, key)
			if err != nil {
				return nil, err
			}
			return &serialClient{lineClient: c}, nil
		})
		closer := clientpool.CloseFn[*serialClient](func(c *serialClient) error {
			c.mu.Lock() // waits for the call in flight
			defer c.mu.Unlock()
			return f.Close(c.lineClient)
		})
		return dial, closer
	}, serialPing)
}

func serialPing(_ context.Context, c *serialClient) error {
	got, err := c.Call("ping")
	if err == nil && got != "pong ping\n" {
		return errors.New("bad answer " + got)
	}
	return err
}

// TestLeaseDoBoundsTheHolder, on the real TCP path: a lease holder
// whose client's Close waits for the call in flight, the cached
// connection frozen. Lease.Do returns at the bound and grace, and
// Release at once after it, while the call stays stuck in the client (the
// guard's close waits for it) until the network heals; then the client is
// closed once and the next lease dials afresh. Before (Lease.Do running
// fn on the holder's goroutine, as code using Client does) the holder
// returned only when the network healed.
func TestLeaseDoBoundsTheHolder(t *testing.T) {
	const bound = time.Second
	s := startSerialStack(t, bound)
	callReturned := make(chan error, 1)
	type returned struct{ do, release error }
	holder := make(chan returned, 1)
	start := time.Now()
	go func() {
		var r returned
		r.release = func() (err error) {
			lease, err := s.pool.Acquire(t.Context(), "k")
			if err != nil {
				return err
			}
			defer lease.Release(&err)
			r.do = lease.Do(lease.Context(), func(ctx context.Context, c *serialClient) error {
				err := serialPing(ctx, c)
				callReturned <- err
				return err
			})
			return r.do
		}()
		holder <- r
	}()
	var r returned
	select {
	case r = <-holder:
	case <-time.After(seedWait):
		// Closing the proxy at cleanup ends the stuck call.
		t.Fatalf("the lease holder was still blocked after %v: it waits for the network to heal", seedWait)
	}
	doErr, err := r.do, r.release
	elapsed := time.Since(start)
	for what, err := range map[string]error{"Lease.Do": doErr, "Release": err} {
		if got := errclass.Of(t.Context(), err); got != errclass.Transport || !errors.Is(err, errclass.ErrCallTimeout) {
			t.Errorf("%s = %v (class %s), want Transport wrapping errclass.ErrCallTimeout", what, err, got)
		}
	}
	// The grace is a twentieth of the bound; a second of slack for a
	// loaded machine.
	if elapsed < bound || elapsed > bound+bound/20+time.Second {
		t.Fatalf("the holder returned after %v, want the bound %v and a little", elapsed, bound)
	}
	select {
	case err := <-callReturned:
		t.Fatalf("the call returned (%v) on a frozen connection whose Close waits for it", err)
	default:
	}
	// The network heals: the stuck call gets its answer, and only then
	// can the guard's close (waiting for it) close the client.
	s.proxy.Thaw()
	if err := <-callReturned; err != nil {
		t.Errorf("the abandoned call, once the network healed: %v", err)
	}
	waitFor(t, "the abandoned client closed", func() bool {
		return metricValue(t, "finale_clientpool_closes_total", s.name, "success") == 1
	})
	if diff := cmp.Diff(map[int64]int32{1: 1}, s.clients.closes()); diff != "" {
		t.Errorf("closes (-want +got):\n%s", diff)
	}
	lease, err := s.pool.Acquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	err = lease.Do(lease.Context(), serialPing)
	lease.Release(&err)
	if err != nil || lease.Client().id != 2 {
		t.Fatalf("next lease: client %d, %v; want a fresh client 2 that works", lease.Client().id, err)
	}
	if got := metricValue(t, "finale_clientpool_abandoned_total", s.name); got != 1 {
		t.Errorf("abandoned %v, want 1", got)
	}
}

// TestLeaseHolderCallIsNotBounded pins down what the package documents as
// not bounded: code that calls the leased client on the holder's own
// goroutine, with a client whose Close waits for the call in flight. The
// guard abandons the lease at its bound (counted, the client evicted, its
// close started in the background), but nothing can interrupt the holder:
// it returns when the network heals, and Release then reports the
// abandonment at once.
func TestLeaseHolderCallIsNotBounded(t *testing.T) {
	s := startSerialStack(t, 200*time.Millisecond)
	holderReturned := make(chan error, 1)
	go func() {
		holderReturned <- func() (err error) {
			lease, err := s.pool.Acquire(t.Context(), "k")
			if err != nil {
				return err
			}
			defer lease.Release(&err)
			return serialPing(lease.Context(), lease.Client())
		}()
	}()
	waitFor(t, "the lease abandoned", func() bool {
		return metricValue(t, "finale_clientpool_abandoned_total", s.name) == 1
	})
	if s.pool.Len() != 0 {
		t.Error("the abandoned client is still cached")
	}
	select {
	case err := <-holderReturned:
		t.Fatalf("the holder returned (%v) before the network healed: the documented limit changed", err)
	default:
	}
	s.proxy.Thaw()
	err := <-holderReturned
	if got := errclass.Of(t.Context(), err); got != errclass.Transport || !errors.Is(err, errclass.ErrCallTimeout) {
		t.Errorf("Release = %v (class %s), want Transport wrapping errclass.ErrCallTimeout", err, got)
	}
	waitFor(t, "the abandoned client closed", func() bool {
		return metricValue(t, "finale_clientpool_closes_total", s.name, "success") == 1
	})
}

// TestLeaseDo: Lease.Do returns fn's error unchanged and re-raises its
// panic; fn's context ends with the lease's (cause ErrCallTimeout at the
// bound) even when the holder passes another context; and fn is not
// called once the lease is released (ErrClosed) or its fence has passed
// (ErrFenced, counted once, by Release).
func TestLeaseDo(t *testing.T) {
	errAnswer := errors.New("an answer")
	t.Run("error unchanged, panic re-raised", func(t *testing.T) {
		for _, bound := range []time.Duration{0, time.Hour} {
			p := newFakePool(t, &fakes{}, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = bound })
			lease, err := p.Acquire(t.Context(), "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Do(t.Context(), func(context.Context, *fakeClient) error { return errAnswer }); err != errAnswer {
				t.Errorf("bound %v: Lease.Do = %v, want fn's error unchanged", bound, err)
			}
			func() {
				defer func() {
					if r := recover(); r != "boom" {
						t.Errorf("bound %v: recovered %v, want fn's panic", bound, r)
					}
				}()
				_ = lease.Do(t.Context(), func(context.Context, *fakeClient) error { panic("boom") })
			}()
			lease.Release(nil)
			err = lease.Do(t.Context(), func(context.Context, *fakeClient) error {
				t.Errorf("bound %v: fn called after Release", bound)
				return nil
			})
			if !errors.Is(err, clientpool.ErrClosed) {
				t.Errorf("bound %v: Lease.Do after Release = %v, want ErrClosed", bound, err)
			}
		}
	})
	t.Run("context ends at the lease's bound", func(t *testing.T) {
		// A 5s bound: its grace (250ms) leaves a loaded machine time to
		// run fn's return, so that the lease is not abandoned.
		p := newFakePool(t, &fakes{}, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = 5 * time.Second })
		err := leased(t.Context(), p, "k", func(_ context.Context, _ *fakeClient) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		lease, err := p.Acquire(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		err = lease.Do(t.Context(), func(ctx context.Context, _ *fakeClient) error {
			<-ctx.Done()
			return context.Cause(ctx)
		})
		lease.Release(&err)
		if !errors.Is(err, errclass.ErrCallTimeout) {
			t.Errorf("fn's context ended with %v, want the lease's bound (ErrCallTimeout)", err)
		}
	})
	// Refused past the fence, counted once, by Release, also when the
	// caller had ended the lease's context before the fence passed (the
	// context's cause is then not ErrFenced).
	for _, callerFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("fenced, caller ended first %v", callerFirst), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(fenceT0)
			var pool string
			p := fencedPool(t, &fakes{}, &testFence{until: fenceT0.Add(time.Second)}, clk, func(o *clientpool.Options[string, *fakeClient]) {
				o.CallTimeout, pool = time.Hour, o.Name
			})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			lease, err := p.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if callerFirst {
				cancel()
			}
			clk.Step(2 * time.Second)
			err = lease.Do(lease.Context(), func(context.Context, *fakeClient) error {
				t.Error("fn called past the fence")
				return nil
			})
			if !errors.Is(err, clientpool.ErrFenced) {
				t.Errorf("Lease.Do past the fence = %v, want ErrFenced", err)
			}
			lease.Release(&err)
			if !errors.Is(err, clientpool.ErrFenced) {
				t.Errorf("Release = %v, want ErrFenced", err)
			}
			if got := metricValue(t, "finale_clientpool_fenced_total", pool); got != 1 {
				t.Errorf("fenced %v, want 1", got)
			}
			if p.Len() != 1 {
				t.Error("a fenced lease evicted its client")
			}
		})
	}
}

// TestCloseOfTheLastCallIsBounded: a bounded call that returns by itself
// with an error that evicts, the last use of its client, closes it; a
// Close that waits for the network (here: until the test lets it) no
// longer holds Do's caller or the lease holder's Release past the call's
// bound and grace. The close goes on and is counted once it ends. Before,
// Do and Release waited for Close.
func TestCloseOfTheLastCallIsBounded(t *testing.T) {
	const bound = time.Second
	unavailable := status.Error(codes.Unavailable, "connection lost")
	for _, via := range []string{"do", "lease", "lease.Do"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			f := &fakes{}
			letClose := make(chan struct{})
			var pool string
			p := newFakePool(t, f, func(o *clientpool.Options[string, *fakeClient]) {
				o.CallTimeout, pool = bound, o.Name
				o.Close = clientpool.CloseFn[*fakeClient](func(c *fakeClient) error {
					<-letClose // a Close that waits for the network
					return f.Close(c)
				})
			})
			t.Cleanup(func() {
				select {
				case <-letClose:
				default:
					close(letClose)
				}
			})
			body := func(context.Context, *fakeClient) error { return unavailable }
			returned := make(chan error, 1)
			start := time.Now()
			go func() {
				switch via {
				case "do":
					returned <- p.Do(t.Context(), "k", body)
				case "lease":
					returned <- leased(t.Context(), p, "k", body)
				default:
					returned <- func() (err error) {
						lease, err := p.Acquire(t.Context(), "k")
						if err != nil {
							return err
						}
						defer lease.Release(&err)
						return lease.Do(lease.Context(), body)
					}()
				}
			}()
			var err error
			select {
			case err = <-returned:
			case <-time.After(bound + 10*time.Second):
				t.Fatalf("%s still blocked in Close %v after the call ended", via, time.Since(start))
			}
			if elapsed := time.Since(start); elapsed > bound+bound/20+time.Second {
				t.Errorf("%s returned after %v, want within the bound %v and a little", via, elapsed, bound)
			}
			if !errors.Is(err, unavailable) {
				t.Errorf("%s = %v, want the call's own error", via, err)
			}
			close(letClose)
			waitFor(t, "the close counted", func() bool {
				return metricValue(t, "finale_clientpool_closes_total", pool, "success") == 1
			})
			if diff := cmp.Diff(map[int64]int32{1: 1}, f.closes()); diff != "" {
				t.Errorf("closes (-want +got):\n%s", diff)
			}
		})
	}
}

package clientpool_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
)

// counts is what a real-transport test asserts after each step.
type counts struct {
	Dials, Closes, Accepted int64
}

func (b *backend) counts(gc *grpcCounters) counts {
	return counts{Dials: gc.dials.Load(), Closes: gc.closes.Load(), Accepted: b.proxy.Accepted()}
}

func newGRPCPool(t *testing.T, gc *grpcCounters, tok perCallToken, mutate func(*clientpool.Options[endpoint, *grpc.ClientConn])) *clientpool.Pool[endpoint, *grpc.ClientConn] {
	t.Helper()
	o := gc.options(uniqueName(t), tok)
	o.CallTimeout = 500 * time.Millisecond
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

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestGRPCFrozenConnectionEvictsAndRedials is the seed incident at the
// transport level: the cached connection goes silent while the server is
// reachable; the next Do times out and evicts, the one after succeeds on a
// fresh connection.
func TestGRPCFrozenConnectionEvictsAndRedials(t *testing.T) {
	b := newBackend(t, "t0")
	gc := &grpcCounters{}
	p := newGRPCPool(t, gc, staticToken("t0"), nil)
	key := endpoint{Addr: b.proxy.Addr(), SecretName: "api-key"}
	ctx := t.Context()

	mustDo(t, p.Do(ctx, key, check(servingService)))
	if diff := cmp.Diff(counts{1, 0, 1}, b.counts(gc)); diff != "" {
		t.Fatalf("after first call (-want +got):\n%s", diff)
	}
	if n := b.proxy.Freeze(); n != 1 {
		t.Fatalf("froze %d connections, want 1", n)
	}

	err := p.Do(ctx, key, check(servingService))
	if status.Code(err) != codes.DeadlineExceeded || errclass.Of(ctx, err) != errclass.Transport {
		t.Fatalf("call on frozen connection: got %v (class %s), want DeadlineExceeded/Transport", err, errclass.Of(ctx, err))
	}
	if diff := cmp.Diff(counts{1, 1, 1}, b.counts(gc)); diff != "" {
		t.Fatalf("after the timed-out call the client must be closed (-want +got):\n%s", diff)
	}

	mustDo(t, p.Do(ctx, key, check(servingService)))
	if diff := cmp.Diff(counts{2, 1, 2}, b.counts(gc)); diff != "" {
		t.Fatalf("recovery must go through a new dial and connection (-want +got):\n%s", diff)
	}
}

// TestGRPCNaivePoolStaysPoisoned: the same fault with eviction off (the
// upstream pool before the fix) fails every call on the cached client.
func TestGRPCNaivePoolStaysPoisoned(t *testing.T) {
	b := newBackend(t, "t0")
	gc := &grpcCounters{}
	p := newGRPCPool(t, gc, staticToken("t0"), func(o *clientpool.Options[endpoint, *grpc.ClientConn]) {
		o.Policy = clientpool.NeverEvict
		o.CallTimeout = 100 * time.Millisecond
	})
	key := endpoint{Addr: b.proxy.Addr()}
	mustDo(t, p.Do(t.Context(), key, check(servingService)))
	b.proxy.Freeze()
	for i := range 5 {
		// The call ends by its own deadline, or, when the machine is so
		// loaded that its answer misses the grace, is abandoned at the
		// bound: a failed call on the cached client either way.
		err := p.Do(t.Context(), key, check(servingService))
		if status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, errclass.ErrCallTimeout) {
			t.Fatalf("retry %d: got %v, want DeadlineExceeded or the call abandoned at its bound", i, err)
		}
	}
	if diff := cmp.Diff(counts{1, 0, 1}, b.counts(gc)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestGRPCAuthErrorEvicts: the server rejects the credentials; the client is
// dropped, and once the right token is available a fresh one works.
func TestGRPCAuthErrorEvicts(t *testing.T) {
	b := newBackend(t, "right")
	var tok atomic.Pointer[string]
	wrong := "wrong"
	tok.Store(&wrong)
	gc := &grpcCounters{}
	p := newGRPCPool(t, gc, func(context.Context) (string, error) { return *tok.Load(), nil }, nil)
	key := endpoint{Addr: b.proxy.Addr()}
	ctx := t.Context()

	err := p.Do(ctx, key, check(servingService))
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("got %v, want Unauthenticated", err)
	}
	if diff := cmp.Diff(counts{1, 1, 1}, b.counts(gc)); diff != "" {
		t.Fatalf("auth error must evict and close (-want +got):\n%s", diff)
	}
	right := "right"
	tok.Store(&right)
	mustDo(t, p.Do(ctx, key, check(servingService)))
	if diff := cmp.Diff(counts{2, 1, 2}, b.counts(gc)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// TestGRPCRotationNeedsNoRedial: credentials read per call follow a rotation
// with the same connection.
func TestGRPCRotationNeedsNoRedial(t *testing.T) {
	b := newBackend(t, "v1")
	var tok atomic.Pointer[string]
	v1 := "v1"
	tok.Store(&v1)
	gc := &grpcCounters{}
	p := newGRPCPool(t, gc, func(context.Context) (string, error) { return *tok.Load(), nil }, nil)
	key := endpoint{Addr: b.proxy.Addr()}
	mustDo(t, p.Do(t.Context(), key, check(servingService)))
	v2 := "v2"
	b.token.Store(&v2)
	tok.Store(&v2)
	mustDo(t, p.Do(t.Context(), key, check(servingService)))
	if diff := cmp.Diff(counts{1, 0, 1}, b.counts(gc)); diff != "" {
		t.Errorf("rotation must not redial (-want +got):\n%s", diff)
	}
}

// TestGRPCNotFoundKeepsClient: a NotFound answer proves the client works.
func TestGRPCNotFoundKeepsClient(t *testing.T) {
	b := newBackend(t, "t0")
	gc := &grpcCounters{}
	p := newGRPCPool(t, gc, staticToken("t0"), nil)
	key := endpoint{Addr: b.proxy.Addr()}
	for range 3 {
		if err := p.Do(t.Context(), key, check("no.such.Service")); status.Code(err) != codes.NotFound {
			t.Fatalf("got %v, want NotFound", err)
		}
	}
	mustDo(t, p.Do(t.Context(), key, check(servingService)))
	if diff := cmp.Diff(counts{1, 0, 1}, b.counts(gc)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestGRPCConcurrentDoDialsOnce: 100 concurrent Do on one key share one dial
// and one connection.
func TestGRPCConcurrentDoDialsOnce(t *testing.T) {
	b := newBackend(t, "t0")
	gc := &grpcCounters{}
	p := newGRPCPool(t, gc, staticToken("t0"), func(o *clientpool.Options[endpoint, *grpc.ClientConn]) {
		o.CallTimeout = 10 * time.Second
	})
	key := endpoint{Addr: b.proxy.Addr()}
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- p.Do(t.Context(), key, check(servingService))
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(counts{1, 0, 1}, b.counts(gc)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

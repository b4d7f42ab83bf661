package clientpool_test

import (
	"context"
	"testing"

	"github.com/finale-dev/finale/clientpool"
)

// The benchmarks pair each pool case with a baseline that calls fn directly
// on an already-dialled client, in the same run, so overhead reads as a
// ratio: compare .../pool with .../direct.

func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	c := &fakeClient{id: 1}
	noop := func(context.Context, *fakeClient) error { return nil }
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := noop(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pool", func(b *testing.B) {
		p := benchPool(b)
		for b.Loop() {
			if err := p.Do(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pool-calltimeout", func(b *testing.B) {
		p := benchPool(b, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = 1e9 })
		for b.Loop() {
			if err := p.Do(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A caller deadline nearer than CallTimeout (a ReconciliationTimeout):
	// the bound is computed from it.
	b.Run("pool-calltimeout-caller-deadline", func(b *testing.B) {
		p := benchPool(b, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = 1e12 })
		dctx, cancel := context.WithTimeout(ctx, 1e11)
		defer cancel()
		for b.Loop() {
			if err := p.Do(dctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		}
	})

	// A real unary gRPC call on loopback (through the proxy): what the
	// overhead is relative to.
	be := newBackend(b, "t0")
	key := endpoint{Addr: be.proxy.Addr()}
	gc := &grpcCounters{}
	o := gc.options("bench-grpc", staticToken("t0"))
	gp, err := clientpool.New(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gp.Close() })
	conn, err := o.Dial.Dial(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	call := check(servingService)
	b.Run("grpc-direct", func(b *testing.B) {
		for b.Loop() {
			if err := call(ctx, conn); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("grpc-pool", func(b *testing.B) {
		for b.Loop() {
			if err := gp.Do(ctx, key, call); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDoParallel(b *testing.B) {
	ctx := context.Background()
	c := &fakeClient{id: 1}
	noop := func(context.Context, *fakeClient) error { return nil }
	b.Run("direct", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := noop(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("pool", func(b *testing.B) {
		p := benchPool(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := p.Do(ctx, "k", noop); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

func benchPool(b *testing.B, mutate ...func(*clientpool.Options[string, *fakeClient])) *clientpool.Pool[string, *fakeClient] {
	b.Helper()
	f := &fakes{}
	o := clientpool.Options[string, *fakeClient]{Name: "bench", Dial: f, Close: f}
	for _, m := range mutate {
		m(&o)
	}
	p, err := clientpool.New(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

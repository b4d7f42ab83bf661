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
	// A lease around the same empty call, as adopting code holds one.
	b.Run("lease", func(b *testing.B) {
		p := benchPool(b)
		for b.Loop() {
			if err := benchLease(ctx, p, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lease-calltimeout", func(b *testing.B) {
		p := benchPool(b, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = 1e9 })
		for b.Loop() {
			if err := benchLease(ctx, p, noop); err != nil {
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
	// The direct call with a timeout of its own, as code without the
	// pool would bound it: the baseline of grpc-pool-calltimeout.
	b.Run("grpc-direct-timeout", func(b *testing.B) {
		for b.Loop() {
			tctx, cancel := context.WithTimeout(ctx, 10e9)
			err := call(tctx, conn)
			cancel()
			if err != nil {
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
	// With CallTimeout the call runs on a goroutine of its own, so that
	// Do returns at the bound whatever the client does.
	o.Name = "bench-grpc-calltimeout"
	o.CallTimeout = 10e9
	gpt, err := clientpool.New(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gpt.Close() })
	b.Run("grpc-pool-calltimeout", func(b *testing.B) {
		for b.Loop() {
			if err := gpt.Do(ctx, key, call); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchLease(ctx context.Context, p *clientpool.Pool[string, *fakeClient], fn func(context.Context, *fakeClient) error) (err error) {
	lease, err := p.Acquire(ctx, "k")
	if err != nil {
		return err
	}
	defer lease.Release(&err)
	return fn(lease.Context(), lease.Client())
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
	b.Run("pool-calltimeout", func(b *testing.B) {
		p := benchPool(b, func(o *clientpool.Options[string, *fakeClient]) { o.CallTimeout = 1e9 })
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

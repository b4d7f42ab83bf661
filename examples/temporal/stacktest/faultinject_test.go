package stacktest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/testenv"
)

// shortKeepalive is the shortest keepalive gRPC allows (it raises anything
// below 10 s to 10 s), so that these tests see keepalive act within
// seconds instead of the SDK's default 30 s + 15 s.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = time.Second
)

// sdkThroughProxy dials the real Temporal server through an HTTP/2-aware
// proxy with the real SDK and a short keepalive.
func sdkThroughProxy(t *testing.T) (*faultinject.Proxy, sdkclient.Client, string) {
	t.Helper()
	ts := testenv.Temporal(t)
	p, err := faultinject.NewHTTP2Proxy(ts.HostPort)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sdkclient.DialContext(t.Context(), sdkclient.Options{
		HostPort: p.Addr(), Namespace: ts.Namespace,
		Logger:            sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: sdkclient.ConnectionOptions{KeepAliveTime: keepaliveTime, KeepAliveTimeout: keepaliveTimeout},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close() // first: it holds stalled connections the client would wait on
		c.Close()
	})
	return p, c, ts.Namespace
}

func describe(ctx context.Context, c sdkclient.Client, ns string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
	return err
}

// TestSDKKeepaliveHealsFreeze is the measurement that made Stall
// necessary: a frozen connection stops answering PINGs, so the SDK's
// keepalive closes it and the same client redials by itself; a cached
// client frozen this way heals without any eviction. With the SDK's
// default keepalive that takes about 45 s (BenchmarkSDKKeepaliveHealsFreeze).
func TestSDKKeepaliveHealsFreeze(t *testing.T) {
	t.Parallel()
	p, c, ns := sdkThroughProxy(t)
	if err := describe(t.Context(), c, ns, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Freeze(); n != 1 {
		t.Fatalf("Freeze() = %d, want 1", n)
	}
	// Calls time out on the frozen connection until keepalive closes it;
	// the next call redials.
	err := controlplane.WaitFor(t.Context(), 4*keepaliveTime, "a call to succeed on the same client", func(ctx context.Context) (bool, error) {
		return describe(ctx, c, ns, 2*time.Second) == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Accepted(); got != 2 {
		t.Errorf("Accepted() = %d, want 2: keepalive closed the frozen connection and the client redialled", got)
	}
}

// TestSDKKeepaliveDoesNotHealStall: a stalled connection answers every
// keepalive PING, so the SDK keeps it for ever and every call on it times
// out; a new connection is served. This is the seed's 39 minutes.
func TestSDKKeepaliveDoesNotHealStall(t *testing.T) {
	t.Parallel()
	p, c, ns := sdkThroughProxy(t)
	if err := describe(t.Context(), c, ns, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Stall(); err != nil || n != 1 {
		t.Fatalf("Stall() = %d, %v; want 1, nil", n, err)
	}
	// Two keepalive rounds answered by the proxy: past the point where a
	// frozen connection was closed.
	err := controlplane.WaitFor(t.Context(), 4*keepaliveTime, "two keepalive PINGs", func(context.Context) (bool, error) {
		return p.PingsAnswered() >= 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := describe(t.Context(), c, ns, time.Second); err == nil {
		t.Fatal("a call on the stalled connection succeeded")
	}
	if got := p.Accepted(); got != 1 {
		t.Errorf("Accepted() = %d, want 1: the client must not have redialled", got)
	}
	fresh, err := sdkclient.DialContext(t.Context(), sdkclient.Options{HostPort: p.Addr(), Namespace: ns, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatalf("a new client must be served: %v", err)
	}
	defer fresh.Close()
	if err := describe(t.Context(), fresh, ns, 10*time.Second); err != nil {
		t.Fatalf("a new client must be served: %v", err)
	}
}

// BenchmarkSDKKeepaliveHealsFreeze measures, with the SDK's default
// keepalive (30 s, 15 s timeout), how long a frozen connection takes to be
// replaced by the SDK itself: seconds from Freeze to the first successful
// call on the same client. Run it alone:
//
//	go test -run '^$' -bench SDKKeepaliveHealsFreeze -benchtime=1x ./stacktest/
func BenchmarkSDKKeepaliveHealsFreeze(b *testing.B) {
	ts := testenv.Temporal(b)
	for b.Loop() {
		p, err := faultinject.NewHTTP2Proxy(ts.HostPort)
		if err != nil {
			b.Fatal(err)
		}
		c, err := sdkclient.DialContext(b.Context(), sdkclient.Options{HostPort: p.Addr(), Namespace: ts.Namespace, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
		if err != nil {
			b.Fatal(err)
		}
		if err := describe(b.Context(), c, ts.Namespace, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		p.Freeze()
		t0 := time.Now()
		for describe(b.Context(), c, ts.Namespace, 5*time.Second) != nil {
			if time.Since(t0) > 3*time.Minute {
				b.Fatal("not healed within 3 minutes")
			}
		}
		b.ReportMetric(time.Since(t0).Seconds(), "s-to-heal")
		_ = p.Close()
		c.Close()
	}
}

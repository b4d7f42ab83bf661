package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"text/tabwriter"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/temporal/controller"
	"github.com/finale-dev/finale/examples/temporal/stack"
	"github.com/finale-dev/finale/internal/testenv"
)

// poisonedRun is one build's deletion after the poisoning.
type poisonedRun struct {
	finished bool
	elapsed  time.Duration // to the finished deletion, or to the end of the wait
	dials    int64         // redials after the poisoning
	calls    int64         // reconciler calls through the pool after the poisoning
	failed   int64         // of which failed
}

// runPoisoned runs steps 1 to 4 on one build and waits at most bound for
// the deletion.
func runPoisoned(b *testing.B, naive bool, bound time.Duration) poisonedRun {
	b.Helper()
	ts := testenv.Temporal(b)
	ctx := b.Context()
	s, err := stack.Start(ctx, stack.Options{Config: testenv.ControlPlane(b).Config, HostPort: ts.HostPort, Namespace: ts.Namespace, Naive: naive})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Stop() }()
	ns, err := s.Namespace(ctx, "g1-bench-")
	if err != nil {
		b.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { return s.Connection(ctx, ns) },
		func() error { return s.APIKeySecret(ctx, ns) },
	} {
		if err := step(); err != nil {
			b.Fatal(err)
		}
	}
	w, err := s.WorkerDeployment(ctx, ns, "app")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.WaitCondition(ctx, w, "Ready", "True", "Available"); err != nil {
		b.Fatal(err)
	}
	if err := s.AddVersion(ctx, w.Spec.DeploymentName, "v1"); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Poison(); err != nil {
		b.Fatal(err)
	}
	dials := s.Op.Dials()
	calls, failed := s.Op.Calls()
	t0 := time.Now()
	if err := s.C.Delete(ctx, w); err != nil {
		b.Fatal(err)
	}
	err = controlplane.WaitGone(ctx, s.C, w, bound)
	r := poisonedRun{finished: err == nil, elapsed: time.Since(t0), dials: s.Op.Dials() - dials}
	c, f := s.Op.Calls()
	r.calls, r.failed = c-calls, f-failed
	if !r.finished {
		if err := s.Release(ctx, w); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// BenchmarkPoisonedClient is the seed's measurement, all in one run on the
// real server: the time from the poisoning to the finished deletion for
// finale against the naive build (still stuck when its wait ends), the
// redials of each, and clientpool.Do's overhead against a direct SDK call
// on the same kind of client.
//
//	cd examples/temporal && go test -run '^$' -bench PoisonedClient -benchtime=1x ./controller/
func BenchmarkPoisonedClient(b *testing.B) {
	const bound = 10 * stack.DefaultCallTimeout
	for b.Loop() {
		guarded := runPoisoned(b, false, bound)
		naive := runPoisoned(b, true, bound)
		o := callOverhead(b, 500)

		b.ReportMetric(guarded.elapsed.Seconds(), "finale-s")
		b.ReportMetric(naive.elapsed.Seconds(), "naive-s")
		b.ReportMetric(float64(guarded.dials), "finale-redials")
		b.ReportMetric(float64(naive.dials), "naive-redials")
		b.ReportMetric(float64(o.pool.Nanoseconds()), "do-ns")
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "\nbuild\tdeletion after poisoning\tredials\tcalls (failed)\n")
		for _, r := range []struct {
			name string
			poisonedRun
		}{{"finale", guarded}, {"naive (v1.7 pool)", naive}} {
			state := fmt.Sprintf("finished in %s", r.elapsed.Round(10*time.Millisecond))
			if !r.finished {
				state = fmt.Sprintf("still stuck after %s", r.elapsed.Round(time.Second))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d (%d)\n", r.name, state, r.dials, r.calls, r.failed)
		}
		fmt.Fprintf(tw, "\nDescribe worker deployment, median of %d\tper call\tratio\n", o.n)
		fmt.Fprintf(tw, "direct SDK call\t%s\t1.00\n", o.direct)
		fmt.Fprintf(tw, "through clientpool.Do\t%s\t%.3f\n", o.viaDo, float64(o.viaDo)/float64(o.direct))
		fmt.Fprintf(tw, "clientpool.Do itself (empty call, mean)\t%s\t%.5f\n", o.pool, float64(o.pool)/float64(o.direct))
		_ = tw.Flush()
	}
}

// overhead is what callOverhead measured.
type overhead struct {
	n             int
	direct, viaDo time.Duration // medians of a Describe call
	pool          time.Duration // mean of a Do around an empty call
}

// callOverhead times n Describe calls made directly on an SDK client and n
// made through a clientpool.Pool holding the same kind of client,
// interleaved so that both see the same load (medians, since a shared
// machine's outliers dwarf the difference), and the pool's own cost
// around an empty call.
func callOverhead(b *testing.B, n int) overhead {
	b.Helper()
	ts := testenv.Temporal(b)
	ctx := b.Context()
	dial := func(ctx context.Context, _ string) (sdkclient.Client, error) {
		return sdkclient.DialContext(ctx, sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	}
	c, err := dial(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p, err := clientpool.New(clientpool.Options[string, sdkclient.Client]{
		Name: "temporal-bench", Dial: clientpool.DialFn[string, sdkclient.Client](dial),
		Close:       clientpool.CloseFunc[sdkclient.Client](sdkclient.Client.Close),
		CallTimeout: controller.DefaultCallTimeout,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	call := func(ctx context.Context, c sdkclient.Client) error {
		_, err := c.WorkerDeploymentClient().GetHandle("finale-bench-absent").Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
		if err != nil && !isNotFound(err) {
			return err
		}
		return nil
	}
	// Warm both paths (the pool's dial, the connections) first.
	if err := p.Do(ctx, "k", call); err != nil {
		b.Fatal(err)
	}
	if err := call(ctx, c); err != nil {
		b.Fatal(err)
	}
	direct := make([]time.Duration, 0, n)
	viaDo := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := call(ctx, c); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(t0))
		t0 = time.Now()
		if err := p.Do(ctx, "k", call); err != nil {
			b.Fatal(err)
		}
		viaDo = append(viaDo, time.Since(t0))
	}
	const empties = 100000
	empty := func(context.Context, sdkclient.Client) error { return nil }
	t0 := time.Now()
	for range empties {
		if err := p.Do(ctx, "k", empty); err != nil {
			b.Fatal(err)
		}
	}
	return overhead{n: n, direct: median(direct), viaDo: median(viaDo), pool: time.Since(t0) / empties}
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

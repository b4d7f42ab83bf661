package sweep_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/finale-dev/finale/internal/procstat"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// BenchmarkSweepPass measures one pass over n records whose owners all exist
// (so no external call is made): listing the records in pages from the real
// apiserver and looking each owner up in a warm metadata cache. Run one size
// per process, the setup of the larger one takes minutes:
//
//	go test -run '^$' -bench 'SweepPass/n=10000$' -benchtime=1x ./sweep/
func BenchmarkSweepPass(b *testing.B) {
	for _, n := range []int{1000, 10000, 20000, 50000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchPass(b, n) })
	}
}

func benchPass(b *testing.B, n int) {
	ctx := b.Context()
	cp := testenv.ControlPlane(b)
	c := testenv.Client(b, testenv.Scheme())
	installWidgets(b, c)
	users := testenv.Namespace(b, c)
	store, err := ledger.NewConfigMapStore(c, testenv.Namespace(b, c))
	if err != nil {
		b.Fatal(err)
	}
	l, err := ledger.New(store, ledger.Options{Key: ledger.GenerateKey(), Clock: clocktesting.NewFakeClock(t0.Add(-time.Hour)), Remember: -1})
	if err != nil {
		b.Fatal(err)
	}
	svc := &memService{deployment: "bench"}

	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error {
			u := widget(users, fmt.Sprintf("w-%06d", i))
			if err := c.Create(gctx, u); err != nil {
				return err
			}
			o := ownerOf(u)
			_, err := l.Create(gctx, ledger.Plan{Owner: o, Declared: []string{"role-" + string(o.UID)}}, svc, func(context.Context, string) ([]string, error) {
				return []string{"role-" + string(o.UID)}, nil
			})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d owners and %d records in %s", n, n, time.Since(start).Round(time.Millisecond))

	owners, err := cache.New(cp.Config, cache.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = owners.Start(cctx) }()
	calls := 0
	s, err := sweep.New(sweep.Options{
		Ledger: l, Owners: owners, Live: c, Clock: clocktesting.NewFakeClock(t0),
		Targets: sweep.TargetsFn(func(context.Context, *ledger.Record) ([]sweep.Candidate, error) {
			calls++
			return nil, nil
		}),
	})
	if err != nil {
		b.Fatal(err)
	}
	// The first pass starts and fills the Widget informer: report it apart.
	cold := time.Now()
	if rep, err := s.Pass(ctx); err != nil || rep.Waiting != n {
		b.Fatalf("cold pass: %+v, %v; want %d waiting", rep, err, n)
	}
	coldTime := time.Since(cold)

	// Return the setup's garbage to the OS and reset the peak, so that
	// peak-rss-MiB is the passes' own high-water mark.
	debug.FreeOSMemory()
	resetPeak := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		rep, err := s.Pass(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Waiting != n || rep.Errors != 0 {
			b.Fatalf("pass: %+v, want %d waiting", rep, n)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	if calls != 0 {
		b.Fatalf("the sweeper asked for targets %d times although every owner exists", calls)
	}
	rss, err := procstat.RSS(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var live runtime.MemStats
	runtime.ReadMemStats(&live)
	if resetPeak == nil {
		if peak, err := peakRSS(); err == nil {
			b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
		}
	}
	b.ReportMetric(float64(n), "records")
	b.ReportMetric(coldTime.Seconds(), "cold-pass-s")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(live.HeapInuse)/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<20), "alloc-MiB/pass")
}

// peakRSS reads VmHWM, the peak resident set since the last reset.
func peakRSS() (int64, error) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}

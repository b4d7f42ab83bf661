package sweep_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/internal/procstat"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// BenchmarkSweepPass measures one pass over n records whose owners all exist
// (so no external call is made): listing the records in pages from the real
// apiserver and looking each owner up in a warm metadata cache. Its baseline,
// measured in the same process after the passes, is a bare paginated LIST of
// the same record ConfigMaps (same page size, each page decoded and
// dropped): what any pass must pay to read the records at all. Run one size
// per process, the setup of the larger ones takes minutes (100,000: about
// half an hour on 2 loaded cores):
//
//	go test -run '^$' -bench 'SweepPass/n=10000$' -benchtime=1x ./stacktest/sweep/
func BenchmarkSweepPass(b *testing.B) {
	for _, n := range []int{1000, 10000, 20000, 50000, 100000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchPass(b, n) })
	}
}

func benchPass(b *testing.B, n int) {
	ctx := b.Context()
	cp := testenv.ControlPlane(b)
	c := testenv.Client(b, testenv.Scheme())
	installWidgets(b, c)
	users := testenv.Namespace(b, c)
	recNS := testenv.Namespace(b, c)
	store, err := ledger.NewConfigMapStore(c, recNS)
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
	base := heapInUse()
	peakHeap := sampleHeap()
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
	passHeap := peakHeap() - base
	runtime.ReadMemStats(&after)
	passAlloc := after.TotalAlloc - before.TotalAlloc
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
	b.ReportMetric(float64(passAlloc)/float64(b.N)/(1<<20), "alloc-MiB/pass")
	b.ReportMetric(float64(passHeap)/(1<<20), "pass-peak-heap-MiB")

	// The baseline: the same records read by a bare paginated LIST.
	runtime.GC()
	base = heapInUse()
	peakHeap = sampleHeap()
	runtime.ReadMemStats(&before)
	listStart := time.Now()
	seen, err := listAll(ctx, c, recNS, sweep.DefaultPageSize)
	listTime := time.Since(listStart)
	listHeap := peakHeap() - base
	runtime.ReadMemStats(&after)
	if err != nil {
		b.Fatal(err)
	}
	if seen < n {
		b.Fatalf("the bare LIST saw %d record ConfigMaps, want at least %d", seen, n)
	}
	passTime := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(listTime.Seconds(), "list-s")
	b.ReportMetric(passTime/listTime.Seconds(), "pass/list")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "list-alloc-MiB")
	b.ReportMetric(float64(listHeap)/(1<<20), "list-peak-heap-MiB")
	b.Logf("%d records: pass %.2f s (target %.0f s), peak heap above the idle process %.1f MiB (target %d MiB); bare paginated LIST of the same ConfigMaps %.2f s, %.1f MiB",
		n, passTime, passTarget.Seconds(), float64(passHeap)/(1<<20), passTargetMiB, listTime.Seconds(), float64(listHeap)/(1<<20))
}

// The sweeper's targets at 100,000 records: a pass in under a minute, in
// under 256 MiB.
const (
	passTarget    = time.Minute
	passTargetMiB = 256
)

// listAll reads every ConfigMap of ns in pages of limit, dropping each page
// once decoded, and says how many it saw.
func listAll(ctx context.Context, c client.Reader, ns string, limit int64) (int, error) {
	n, cont := 0, ""
	for {
		var l corev1.ConfigMapList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.Limit(limit), client.Continue(cont)); err != nil {
			return n, err
		}
		n += len(l.Items)
		if cont = l.Continue; cont == "" {
			return n, nil
		}
	}
}

// heapInUse is the bytes of live and not yet swept heap objects, read
// without stopping the world.
func heapInUse() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// sampleHeap samples heapInUse every 5 ms until the returned function is
// called, which returns the highest sample.
func sampleHeap() func() uint64 {
	done, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var max uint64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if h := heapInUse(); h > max {
				max = h
			}
			select {
			case <-t.C:
			case <-done:
				peak <- max
				return
			}
		}
	}()
	return func() uint64 { close(done); return <-peak }
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

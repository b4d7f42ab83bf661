package sweep_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/finale-dev/finale/internal/sweepbench"
	"github.com/finale-dev/finale/internal/testenv"
)

// BenchmarkSweepPass measures one pass over n records whose owners all exist
// (so no external call is made): listing the records in pages from the real
// apiserver and looking each owner up in a warm cache, against a bare
// paginated LIST of the same record ConfigMaps measured in the same process
// after it (internal/sweepbench). Run one size per process, the setup of
// the larger ones takes minutes (100,000: about a quarter of an hour):
//
//	go test -run '^$' -bench 'SweepPass/n=10000$' -benchtime=1x ./stacktest/sweep/
//
// finale-lab bench -all (make bench) reports the 100,000-record pass in its
// table.
func BenchmarkSweepPass(b *testing.B) {
	for _, n := range []int{1000, 10000, 20000, 50000, 100000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchPass(b, n) })
	}
}

func benchPass(b *testing.B, n int) {
	cp := testenv.ControlPlane(b)
	c := testenv.Client(b, testenv.Scheme())
	var r sweepbench.Result
	var err error
	for b.Loop() {
		if r, err = sweepbench.Run(b.Context(), cp.Config, c, n, nil); err != nil {
			b.Fatal(err)
		}
	}
	if r.PeakRSS > 0 {
		b.ReportMetric(float64(r.PeakRSS)/(1<<20), "peak-rss-MiB")
	}
	b.ReportMetric(r.Pass.Seconds(), "pass-s")
	b.ReportMetric(r.Cold.Seconds(), "cold-pass-s")
	b.ReportMetric(float64(r.PassAlloc)/(1<<20), "alloc-MiB/pass")
	b.ReportMetric(float64(r.PassHeap)/(1<<20), "pass-peak-heap-MiB")
	b.ReportMetric(r.List.Seconds(), "list-s")
	b.ReportMetric(r.Pass.Seconds()/r.List.Seconds(), "pass/list")
	b.ReportMetric(float64(r.ListAlloc)/(1<<20), "list-alloc-MiB")
	b.ReportMetric(float64(r.ListHeap)/(1<<20), "list-peak-heap-MiB")
	b.Logf("%d records: pass %.2f s (target %s), peak RSS %.1f MiB (target %d MiB); bare paginated LIST of the same ConfigMaps %.2f s; setup %s",
		n, r.Pass.Seconds(), sweepbench.TargetPass, float64(r.PeakRSS)/(1<<20), sweepbench.TargetRSSMiB, r.List.Seconds(), r.Setup.Round(time.Second))
}

package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/internal/procstat"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/pgserver"
)

// The cluster the operator's memory is measured in: this many Secrets of
// this size that have nothing to do with it.
const (
	noiseSecrets    = 2000
	noiseSecretSize = 100 << 10
)

// createNoise creates n Secrets of size random bytes each in ns, a few at a
// time.
func createNoise(b *testing.B, c client.Client, ns string, n, size int) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				data := make([]byte, size)
				_, _ = rand.Read(data)
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("noise-%05d", i)}, Data: map[string][]byte{"blob": data}}
				if err := c.Create(context.Background(), s); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// memorySample is one operator process's memory once it had synced its
// cache and made a Server Ready.
type memorySample struct{ rss, peak int64 }

// BenchmarkOperatorMemoryWithSecrets measures the operator process's
// resident memory with 2,000 unrelated 100 KiB Secrets in the cluster: as
// it ran before Secrets were metadata only (a typed informer of every Secret; the baseline,
// same binary, same flags) and as it runs now (Secrets as metadata only,
// their data read live, cache transforms). Each iteration runs both, one
// after the other, and waits until each has made a fresh Server Ready,
// which it can only do after its cache has synced. Reported: RSS then and
// peak RSS (VmHWM, what a memory limit must allow), and the ratios.
//
//	go test -run '^$' -bench OperatorMemory -benchtime 1x ./examples/postgres/cmd/operator/
//
// Run it without -race: the race detector multiplies memory.
func BenchmarkOperatorMemoryWithSecrets(b *testing.B) {
	cp, pg, c := stack(b)
	recNS := testenv.Namespace(b, c)
	noise := testenv.Namespace(b, c)
	t0 := time.Now()
	createNoise(b, c, noise, noiseSecrets, noiseSecretSize)
	b.Logf("created %d Secrets of %d KiB in %s", noiseSecrets, noiseSecretSize>>10, time.Since(t0).Round(time.Second))
	ns := testenv.Namespace(b, c)
	if err := c.Create(b.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admin"},
		Data: map[string][]byte{"username": []byte(pgserver.AdminUser), "password": []byte(pg.Password)}}); err != nil {
		b.Fatal(err)
	}

	modes := []struct {
		name string
		env  []string
	}{
		{"before: typed Secret informer", []string{cachingSecrets + "=1"}},
		{"after: metadata only", nil},
	}
	samples := make([][]memorySample, len(modes))
	run := 0
	for b.Loop() {
		for m, mode := range modes {
			run++
			p := startOperator(b, cp.Kubeconfig, recNS, mode.env, "--metrics-bind-address=0", "--health-probe-bind-address=0")
			srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pg-%d", run)}, Spec: v1alpha1.ServerSpec{
				Host: pg.Host, Port: int32(pg.Port), SSLMode: v1alpha1.SSLModeDisable, CredentialsSecretRef: v1alpha1.CredentialsSecretReference{Name: "admin"}}}
			if err := c.Create(b.Context(), srv); err != nil {
				b.Fatal(err)
			}
			err := controlplane.WaitFor(b.Context(), 5*time.Minute, "Server "+srv.Name+" Ready", func(ctx context.Context) (bool, error) {
				if err := c.Get(ctx, client.ObjectKeyFromObject(srv), srv); err != nil {
					return false, err
				}
				return meta.IsStatusConditionTrue(srv.Status.Conditions, v1alpha1.ConditionReady), nil
			})
			if err != nil {
				b.Fatal(err)
			}
			rss, err := procstat.RSS(p.cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			peak, err := procstat.PeakRSS(p.cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			p.stop()
			samples[m] = append(samples[m], memorySample{rss: rss, peak: peak})
		}
	}
	mean := func(xs []memorySample, f func(memorySample) int64) float64 {
		var sum int64
		for _, x := range xs {
			sum += f(x)
		}
		return float64(sum) / float64(len(xs))
	}
	rss := func(s memorySample) int64 { return s.rss }
	peak := func(s memorySample) int64 { return s.peak }
	const mib = 1 << 20
	before, after := samples[0], samples[1]
	b.ReportMetric(mean(before, rss)/mib, "before-rss-MiB")
	b.ReportMetric(mean(after, rss)/mib, "after-rss-MiB")
	b.ReportMetric(mean(before, rss)/mean(after, rss), "rss-ratio")
	b.ReportMetric(mean(before, peak)/mib, "before-peak-MiB")
	b.ReportMetric(mean(after, peak)/mib, "after-peak-MiB")
	b.ReportMetric(mean(before, peak)/mean(after, peak), "peak-ratio")
	var table strings.Builder
	fmt.Fprintf(&table, "%-32s %10s %10s\n", fmt.Sprintf("operator (%d x %d KiB Secrets)", noiseSecrets, noiseSecretSize>>10), "RSS MiB", "peak MiB")
	for m, mode := range modes {
		fmt.Fprintf(&table, "%-32s %10.0f %10.0f\n", mode.name, mean(samples[m], rss)/mib, mean(samples[m], peak)/mib)
	}
	fmt.Fprintf(&table, "%-32s %10.1f %10.1f\n", "ratio before/after", mean(before, rss)/mean(after, rss), mean(before, peak)/mean(after, peak))
	b.Logf("\n%s", table.String())
}

package capture_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/internal/testenv"
)

// BenchmarkRelease measures, per child, the time from its delete request to
// its disappearance and the release path's API writes (counted at its
// client), with the owner's workers live (the owner records, the release
// path only removes the finalizer) and stopped (the release path persists,
// then removes it). Run briefly:
//
//	go test -run '^$' -bench Release -benchtime 20x ./capture/
func BenchmarkRelease(b *testing.B) {
	for _, mode := range []string{"owner-live", "owner-stopped"} {
		b.Run(mode, func(b *testing.B) {
			live := mode == "owner-live"
			c, ns := env(b)
			st := startStack(b, ns, stackOptions{ownerOpen: live})
			job, pods := launch(b, c, ns, "bench", b.N, captureFin)
			for _, p := range pods {
				succeed(b, c, p, successfulWords)
			}
			if live {
				waitJobPhase(b, c, job, phaseSucceeded)
			}
			wc, err := client.NewWithWatch(testenv.ControlPlane(b).Config, client.Options{Scheme: scheme()})
			if err != nil {
				b.Fatal(err)
			}
			w, err := wc.Watch(b.Context(), &corev1.PodList{}, client.InNamespace(ns))
			if err != nil {
				b.Fatal(err)
			}
			defer w.Stop()
			b.ResetTimer()
			var total time.Duration
			for _, p := range pods {
				start := time.Now()
				deletePod(b, c, p)
				waitDeleted(b, w, p.Name)
				total += time.Since(start)
			}
			b.StopTimer()

			if live {
				// The owner recorded before the deletion; the release
				// path's finalizer removal may land just after: count it.
				for _, p := range pods {
					waitFinalizerGone(b, c, p, captureFin)
				}
			}
			_, writes, conflicts := st.writes.snapshot()
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/release")
			b.ReportMetric(float64(writes)/float64(b.N), "writes/child")
			b.ReportMetric(float64(conflicts)/float64(b.N), "conflicts/child")
			if got := getJob(b, c, job); len(got.Status.Results) != b.N {
				b.Fatalf("results recorded = %d, want %d", len(got.Status.Results), b.N)
			}
		})
	}
}

func waitDeleted(b *testing.B, w watch.Interface, name string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Second)
	defer cancel()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("watch closed")
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type == watch.Deleted && p.Name == name {
				return
			}
		case <-ctx.Done():
			b.Fatalf("pod %s not deleted within 30s", name)
		}
	}
}

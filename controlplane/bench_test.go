package controlplane_test

import (
	"testing"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/kubebin"
	"github.com/finale-dev/finale/internal/procstat"
	"github.com/finale-dev/finale/pgserver"
)

// BenchmarkStart measures start-to-ready of each component and its RSS right
// after it is ready. Run with -benchtime=3x: every iteration is a full start.
//
//	go test -run '^$' -bench Start -benchtime=3x ./controlplane/
func BenchmarkStart(b *testing.B) {
	b.Run("controlplane", func(b *testing.B) {
		var ready = map[string]float64{}
		var rss = map[string]float64{}
		for b.Loop() {
			cp, err := controlplane.Start(b.Context(), controlplane.Options{})
			if err != nil {
				b.Fatal(err)
			}
			for name, pid := range cp.PIDs() {
				ready[name] += float64(cp.Started[name].Milliseconds())
				if r, err := procstat.RSS(pid); err == nil {
					rss[name] += float64(r) / (1 << 20)
				}
			}
			if err := cp.Stop(); err != nil {
				b.Fatal(err)
			}
		}
		for _, name := range []string{kubebin.Etcd, kubebin.KubeAPIServer, kubebin.KubeControllerManager} {
			b.ReportMetric(ready[name]/float64(b.N), name+"-ready-ms")
			b.ReportMetric(rss[name]/float64(b.N), name+"-rss-MiB")
		}
	})
	b.Run("postgres", func(b *testing.B) {
		var rss float64
		for b.Loop() {
			s, err := pgserver.Start(b.Context(), pgserver.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if r, err := procstat.RSS(s.PID()); err == nil {
				rss += float64(r) / (1 << 20)
			}
			if err := s.Stop(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(rss/float64(b.N), "postgres-rss-MiB")
	})
}

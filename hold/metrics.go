package hold

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// activeHolds counts parents being deleted that are currently held, by
	// parent kind.
	activeHolds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "finale_hold_active",
		Help: "Parents being deleted whose deletion is currently held for their dependents.",
	}, []string{"kind"})
	// holdDuration observes, at release, the time from the parent's
	// deletionTimestamp to its release, on the injected clock.
	holdDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "finale_hold_duration_seconds",
		Help:    "Time from a parent's deletionTimestamp to the release of its hold.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1800},
	}, []string{"kind"})
	// releasesTotal counts ended holds by parent kind and reason.
	releasesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_hold_releases_total",
		Help: "Holds released, by parent kind and reason (dependents_done, timeout, access_not_ready, owned_gone).",
	}, []string{"kind", "reason"})
	// releasedWithoutDeleteTotal counts dependents that dropped their cleanup
	// finalizer without deleting their external resource, by dependent kind.
	releasedWithoutDeleteTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_released_without_delete_total",
		Help: "Dependents released without their external delete because the hold on their parent ended; their cleanup records stay for the sweeper.",
	}, []string{"kind"})
	// earlyDeletesTotal counts dependents whose deletion the hold started
	// in a terminating namespace (NamespaceReconciler), by dependent kind.
	earlyDeletesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_hold_namespace_deletes_total",
		Help: "Dependents in a terminating namespace whose deletion the hold started, ahead of the namespace controller.",
	}, []string{"kind"})
)

func init() {
	metrics.Registry.MustRegister(activeHolds, holdDuration, releasesTotal, releasedWithoutDeleteTotal, earlyDeletesTotal)
}

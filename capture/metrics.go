package capture

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric names, exported so that dashboards and tests refer to one spelling.
const (
	MetricPending   = "finale_capture_pending"
	MetricOverdue   = "finale_capture_overdue"
	MetricReleases  = "finale_capture_releases_total"
	MetricPersisted = "finale_capture_persisted_total"
	MetricConflicts = "finale_capture_persist_conflicts_total"
	// MetricResultsNotKept counts status writes that succeeded but whose
	// returned object did not hold the result (see ErrResultNotKept).
	MetricResultsNotKept = "finale_capture_results_not_kept_total"
)

// Every vector is labelled by the release controller's name (Options.Name),
// so that several capture controllers in one process stay apart.
var (
	pendingGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricPending,
		Help: "Children being deleted whose capture finalizer is held because their active owner has not recorded their result yet.",
	}, []string{"controller"})
	overdueGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricOverdue,
		Help: "Pending captures older than the pending threshold. Visibility only: age never releases a capture.",
	}, []string{"controller"})
	releasesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricReleases,
		Help: "Capture finalizers removed, by the reason the release rule gave.",
	}, []string{"controller", "reason"})
	persistedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricPersisted,
		Help: "Child results written to the owner by the release path because the owner had not recorded them.",
	}, []string{"controller"})
	notKeptTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricResultsNotKept,
		Help: "Status writes of the owner that succeeded but returned an object without the child's result (a schema that prunes it, a webhook that strips it); the finalizer stays and the pass is retried with backoff.",
	}, []string{"controller"})
	conflictsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricConflicts,
		Help: "Conflicts on the owner's status while persisting a child's result; each one was retried.",
	}, []string{"controller"})
)

func init() {
	metrics.Registry.MustRegister(pendingGauge, overdueGauge, releasesTotal, persistedTotal, conflictsTotal, notKeptTotal)
}

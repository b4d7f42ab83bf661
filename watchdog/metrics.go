package watchdog

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// successLabel is the class label of an attempt that returned no error.
const successLabel = "Success"

// Package-level vectors: several Watchdogs in one process (one per
// controller) add up in the same series, which is what a dashboard wants.
var (
	pendingDeletions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "finale_watchdog_pending_deletions",
		Help: "Deletions in progress: objects with a deletionTimestamp whose finalizer has not been removed yet.",
	}, []string{"kind", "finalizer"})

	blockedDeletions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "finale_watchdog_blocked_deletions",
		Help: "Deletions in progress for longer than the watchdog threshold.",
	}, []string{"kind", "finalizer"})

	cleanupAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_watchdog_cleanup_attempts_total",
		Help: "Cleanup attempts of deletion finalizers, by error class (Success when the attempt returned no error).",
	}, []string{"kind", "finalizer", "class"})

	ageAtCompletion = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "finale_watchdog_deletion_age_at_completion_seconds",
		Help: "Time from deletionTimestamp to the removal of the finalizer.",
		// 1s to about 9h: a deletion that takes longer is an incident anyway.
		Buckets: prometheus.ExponentialBuckets(1, 2, 16),
	}, []string{"kind", "finalizer"})

	conditionWriteFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_watchdog_condition_write_failures_total",
		Help: "Failures to write the CleanupBlocked condition; the caller is not affected.",
	}, []string{"kind"})
)

func init() {
	metrics.Registry.MustRegister(pendingDeletions, blockedDeletions, cleanupAttempts, ageAtCompletion, conditionWriteFailures)
}

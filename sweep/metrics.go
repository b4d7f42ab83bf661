package sweep

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// State is what the last pass concluded about a record.
type State string

// The states of a record, as the records gauge labels them.
const (
	// Waiting: the owner exists; nothing to do.
	Waiting State = "waiting"
	// Settling: the owner is gone, but its last create attempt is younger
	// than the settle window.
	Settling State = "settling"
	// Unreachable: the owner is gone and settled, but no connection proves
	// the record's deployment (or the cleanup through it failed).
	Unreachable State = "unreachable"
	// Invalid: the record does not decode, is inconsistent, or is not
	// signed by this operator's key; never acted on.
	Invalid State = "invalid"
	// Adoptable: the owner's UID is gone but an object of the same kind,
	// namespace and name claims the record (ledger.AnnotationUID: restored,
	// re-created by GitOps with the annotation): it may adopt the record, so
	// nothing is deleted while the claim stands.
	Adoptable State = "adoptable"
	// Unverified: the owner is gone and settled, but every connection the
	// record may use is unauthenticated (Candidate.Authentication is
	// empty): a copy of the deployment behind a proxy could answer
	// through it, so nothing is asked, deleted or removed.
	Unverified State = "unverified"
	// Retained: the owner is gone and its deletion policy was Retain: the
	// resources and the record stay (a restored owner may adopt them); the
	// sweeper never acts on it.
	Retained State = "retained"
)

var states = []State{Waiting, Settling, Unreachable, Invalid, Adoptable, Unverified, Retained}

var (
	recordsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "finale_sweep_records",
		Help: "Cleanup records by the state the last sweep pass found them in.",
	}, []string{"state"})
	deletedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "finale_sweep_deleted_total",
		Help: "External resources the sweeper deleted (confirmed by the deployment).",
	})
	removedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "finale_sweep_records_removed_total",
		Help: "Cleanup records removed after their deployment confirmed the delete.",
	})
	errorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_sweep_errors_total",
		Help: "Sweeper errors by errclass class.",
	}, []string{"class"})
	passSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "finale_sweep_pass_duration_seconds",
		Help:    "Duration of one sweep pass over all records.",
		Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
	})
)

func init() {
	metrics.Registry.MustRegister(recordsGauge, deletedTotal, removedTotal, errorsTotal, passSeconds)
}

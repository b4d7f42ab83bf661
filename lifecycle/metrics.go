package lifecycle

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Outcome label values.
const (
	outcomeCreated  = "created"
	outcomeAdopted  = "adopted"
	outcomeDeleted  = "deleted"
	outcomeRetained = "retained"
	outcomeReleased = "released_without_delete"
	// outcomeAdoptedFrom: resources and record taken over from a previous
	// object of the same kind, namespace and name.
	outcomeAdoptedFrom = "adopted_from_previous"
	// outcomeNothingCreated: deleted at once, nothing had been created.
	outcomeNothingCreated = "nothing_created"
)

var (
	// createsTotal counts external resources created, and those adopted by their
	// ownership tag after an answer was lost: adoptions that are frequent
	// say creates time out.
	createsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_lifecycle_creates_total",
		Help: "External resources created, or adopted by their ownership tag, by kind and outcome (created, adopted, adopted_from_previous).",
	}, []string{"kind", "outcome"})
	// deletionsTotal counts cleanup finalizers removed, by how.
	deletionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_lifecycle_deletions_total",
		Help: "Cleanup finalizers removed, by kind and outcome (deleted, retained, nothing_created, released_without_delete).",
	}, []string{"kind", "outcome"})
)

func init() {
	crmetrics.Registry.MustRegister(createsTotal, deletionsTotal)
}

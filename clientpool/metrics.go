package clientpool

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/finale-dev/finale/errclass"
)

// Metric label values.
const (
	callOK     = "OK"
	dialOK     = "success"
	dialError  = "error"
	closeOK    = "success"
	closeError = "error"
)

var (
	clientsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "finale_clientpool_clients",
		Help: "Clients cached by the pool.",
	}, []string{"pool"})
	dialsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_clientpool_dials_total",
		Help: "Dials by result (success, error); one per key however many callers wait on it.",
	}, []string{"pool", "result"})
	evictionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_clientpool_evictions_total",
		Help: "Clients dropped, by reason: the error class that evicted them, or MaxAge, IdleTimeout, NotAfter, Evict, PoolClosed, Replaced.",
	}, []string{"pool", "reason"})
	callsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_clientpool_calls_total",
		Help: "Calls through Do and leases, by the error class of their result (OK for success).",
	}, []string{"pool", "class"})
	closesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_clientpool_closes_total",
		Help: "Clients closed, by result (success, error).",
	}, []string{"pool", "result"})
	fencedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_clientpool_fenced_total",
		Help: "Calls and dials the fence refused to start or ended (the replica may no longer hold its lease).",
	}, []string{"pool"})
	abandonedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_clientpool_abandoned_total",
		Help: "Calls and leases still running a grace after their bound, given up on: the caller freed, the client evicted (by the policy) and closed. Each is also a Transport call.",
	}, []string{"pool"})
)

func init() {
	crmetrics.Registry.MustRegister(clientsGauge, dialsTotal, evictionsTotal, callsTotal, closesTotal, fencedTotal, abandonedTotal)
}

// metrics holds the pool's series, resolved once at New: label lookups
// cost more than the rest of Do.
type metrics struct {
	clients               prometheus.Gauge
	dialOKs, dialErrors   prometheus.Counter
	closeOKs, closeErrors prometheus.Counter
	callsOK               prometheus.Counter
	fenced                prometheus.Counter
	abandoned             prometheus.Counter
	callsByClass          map[errclass.Class]prometheus.Counter // read-only after newMetrics
	pool                  string
	evictions             *prometheus.CounterVec
}

func newMetrics(pool string) metrics {
	m := metrics{
		clients:      clientsGauge.WithLabelValues(pool),
		dialOKs:      dialsTotal.WithLabelValues(pool, dialOK),
		dialErrors:   dialsTotal.WithLabelValues(pool, dialError),
		closeOKs:     closesTotal.WithLabelValues(pool, closeOK),
		closeErrors:  closesTotal.WithLabelValues(pool, closeError),
		callsOK:      callsTotal.WithLabelValues(pool, callOK),
		fenced:       fencedTotal.WithLabelValues(pool),
		abandoned:    abandonedTotal.WithLabelValues(pool),
		callsByClass: map[errclass.Class]prometheus.Counter{},
		pool:         pool,
		evictions:    evictionsTotal,
	}
	for _, c := range errclass.Classes {
		m.callsByClass[c] = callsTotal.WithLabelValues(pool, string(c))
	}
	return m
}

// call counts a failed call; classes from user classifiers beyond the
// built-in set get their series on first use.
func (m metrics) call(c errclass.Class) {
	if ctr, ok := m.callsByClass[c]; ok {
		ctr.Inc()
		return
	}
	callsTotal.WithLabelValues(m.pool, string(c)).Inc()
}

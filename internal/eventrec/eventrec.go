// Package eventrec gets an events.k8s.io/v1 recorder from a
// controller-runtime manager of any version finale supports, whose Events
// never hit a terminating namespace.
//
// A namespace being deleted refuses every new object, Events included,
// and client-go's broadcaster logs each refusal as an ERROR ("Server
// rejected event"). Deletion is exactly when finale's components have
// things to say about objects there: the hold releasing a parent, a
// dependent released without its delete, a cleanup that is stuck. One
// black-box run counted 357 refused Events. The recorder For returns sends
// through a guard (the one place every finale Event goes through, whichever
// component emits it) that, for an Event whose namespace is terminating:
//
//   - sends it to Options.Fallback (the operator's own namespace) when its
//     reason is one of Options.Redirect: the Event keeps its regarding
//     object, which names the object and its namespace;
//   - drops it quietly otherwise (counted in
//     finale_events_diverted_total{outcome="dropped"}, logged at V(1)).
//
// A namespace is known to be terminating from Options.Namespaces (the
// manager's cache, metadata only) before anything is sent; without it, or
// when the cache has not seen the deletion yet, from the API server's
// refusal of the first Event sent there, which is then handled the same
// way (counted in finale_events_refused_total, not logged as an error) and
// remembered for a while.
//
// The recorder is made here rather than taken from the manager
// (Manager.GetEventRecorder, controller-runtime v0.23 and later) because
// only a broadcaster made here can have its sink guarded. It records from
// the moment For returns (an Event emitted before a broadcaster records is
// lost, and a manager may already be running when For is called) and is
// shut down with the manager, by a Runnable that needs no leader election.
package eventrec

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Options tune For. The zero value guards by refusals alone and drops
// every Event a terminating namespace refuses.
type Options struct {
	// Namespaces reads Namespace objects as metav1.PartialObjectMetadata:
	// the manager's cache, with the Namespace metadata informer registered
	// before the manager starts (Informer). It needs get, list and watch on
	// namespaces. nil: a terminating namespace is learned from the refusal
	// of the first Event sent into it.
	Namespaces client.Reader
	// Fallback is the namespace Events with a reason in Redirect go to when
	// theirs is terminating: the operator's own namespace. Empty drops them
	// too.
	Fallback string
	// Redirect are the reasons worth finding after the namespace is gone.
	Redirect []string
	// Clock times how long a refusal is remembered; nil is the real clock.
	Clock clock.PassiveClock
}

// Outcomes of finale_events_diverted_total.
const (
	OutcomeRedirected = "redirected"
	OutcomeDropped    = "dropped"
)

var (
	// Diverted counts Events not sent to their own namespace because it is
	// terminating, by outcome.
	Diverted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finale_events_diverted_total",
		Help: "Events whose namespace is terminating: redirected to the operator's namespace, or dropped.",
	}, []string{"outcome"})
	// Refused counts Events the API server refused because their namespace
	// is terminating or gone, which the guard did not know beforehand.
	Refused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "finale_events_refused_total",
		Help: "Events refused by the API server because their namespace was terminating or gone (then redirected or dropped).",
	})
)

func init() {
	metrics.Registry.MustRegister(Diverted, Refused)
}

// remember is how long a namespace that refused an Event is taken for
// terminating without asking again. A namespace re-created under the same
// name within it loses its Events for that long when there is no
// Namespaces reader to say it is live.
const remember = 5 * time.Minute

// lookupTimeout bounds a Namespaces read, so that a cache that cannot
// serve Namespaces (no informer, no RBAC) slows the sink, never stops it.
const lookupTimeout = 2 * time.Second

// For returns the recorder that reports as name (the Events'
// reportingController), guarded as opts says.
func For(mgr manager.Manager, name string, opts ...Options) (events.EventRecorder, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("eventrec: events client for %s: %w", name, err)
	}
	b := events.NewBroadcaster(NewSink(&events.EventSinkImpl{Interface: cs.EventsV1()}, o))
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("eventrec: start %s: %w", name, err)
	}
	if err := mgr.Add(broadcaster{b: b, stop: cancel}); err != nil {
		cancel()
		b.Shutdown()
		return nil, fmt.Errorf("eventrec: add the %s broadcaster to the manager: %w", name, err)
	}
	return b.NewRecorder(mgr.GetScheme(), name), nil
}

// Informer registers the metadata informer on Namespaces that
// Options.Namespaces reads, so that the manager starts it (and waits for
// it) with its cache rather than on the first Event.
func Informer(ctx context.Context, mgr manager.Manager) error {
	if _, err := mgr.GetCache().GetInformer(ctx, namespaceMeta()); err != nil {
		return fmt.Errorf("eventrec: Namespace informer: %w", err)
	}
	return nil
}

// broadcaster shuts a recording events broadcaster down when the manager
// stops.
type broadcaster struct {
	b    events.EventBroadcaster
	stop context.CancelFunc
}

func (r broadcaster) Start(ctx context.Context) error {
	<-ctx.Done()
	r.b.Shutdown()
	r.stop()
	return nil
}

// NeedLeaderElection is false: a replica that does not lead emits nothing,
// and its broadcaster must stop with its manager all the same.
func (broadcaster) NeedLeaderElection() bool { return false }

// Sink is an events.EventSink that keeps Events out of terminating
// namespaces (see the package doc). Build it with NewSink.
type Sink struct {
	next     events.EventSink
	ns       client.Reader
	fallback string
	redirect map[string]bool
	clock    clock.PassiveClock

	mu      sync.Mutex           // guards refused
	refused map[string]time.Time // namespace: when it refused an Event
}

// NewSink guards next.
func NewSink(next events.EventSink, o Options) *Sink {
	s := &Sink{next: next, ns: o.Namespaces, fallback: o.Fallback, redirect: map[string]bool{}, clock: o.Clock, refused: map[string]time.Time{}}
	for _, r := range o.Redirect {
		s.redirect[r] = true
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	return s
}

// Create sends ev to its namespace, or diverts it.
func (s *Sink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	if s.terminating(ctx, ev.Namespace) {
		return s.divert(ctx, ev)
	}
	out, err := s.next.Create(ctx, ev)
	if err != nil && s.cannotLand(ev.Namespace, err) {
		Refused.Inc()
		return s.divert(ctx, ev)
	}
	return out, err
}

// Update passes ev on: an update of an Event that exists lands.
func (s *Sink) Update(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return s.next.Update(ctx, ev)
}

// Patch adds to a series: in the fallback namespace for a redirected
// reason (where the series' first Event went), nowhere for a dropped one.
// A patch that finds no Event makes the broadcaster Create it, which
// diverts it.
func (s *Sink) Patch(ctx context.Context, old *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	if !s.terminating(ctx, old.Namespace) {
		return s.next.Patch(ctx, old, data)
	}
	if !s.redirects(old) {
		Diverted.WithLabelValues(OutcomeDropped).Inc()
		return old, nil
	}
	moved := old.DeepCopy()
	moved.Namespace = s.fallback
	return s.next.Patch(ctx, moved, data)
}

func (s *Sink) redirects(ev *eventsv1.Event) bool {
	return s.redirect[ev.Reason] && s.fallback != "" && ev.Namespace != s.fallback
}

// divert sends ev to the fallback namespace or drops it.
func (s *Sink) divert(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	if !s.redirects(ev) {
		Diverted.WithLabelValues(OutcomeDropped).Inc()
		logf.Log.WithName("eventrec").V(1).Info("dropped an Event: its namespace is terminating",
			"namespace", ev.Namespace, "reason", ev.Reason, "regarding", ev.Regarding.Kind+"/"+ev.Regarding.Name)
		return ev, nil
	}
	moved := ev.DeepCopy()
	moved.Namespace = s.fallback
	moved.ResourceVersion = ""
	out, err := s.next.Create(ctx, moved)
	if err == nil {
		Diverted.WithLabelValues(OutcomeRedirected).Inc()
	}
	return out, err
}

// terminating reports whether ns is being deleted: the Namespaces reader
// decides when it can answer; otherwise a recent refusal does.
func (s *Sink) terminating(ctx context.Context, ns string) bool {
	if ns == "" || ns == s.fallback {
		return false
	}
	if s.ns != nil {
		ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		m := namespaceMeta()
		if err := s.ns.Get(ctx, client.ObjectKey{Name: ns}, m); err == nil {
			return !m.DeletionTimestamp.IsZero()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.refused[ns]
	if ok && s.clock.Since(at) >= remember {
		delete(s.refused, ns)
		ok = false
	}
	return ok
}

// cannotLand reports whether err is the API server refusing an Event
// because its namespace is terminating or gone, and remembers the
// namespace.
func (s *Sink) cannotLand(ns string, err error) bool {
	switch {
	case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
	case apierrors.IsNotFound(err):
		// Only a namespace can be missing for a create. Remembered too:
		// the broadcaster patches a series into the namespace of its first
		// Event, which must then find the redirected one.
	default:
		return false
	}
	s.mu.Lock()
	s.refused[ns] = s.clock.Now()
	s.mu.Unlock()
	return true
}

func namespaceMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

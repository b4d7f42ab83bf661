package lifecycle

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/internal/eventrec"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
	"github.com/finale-dev/finale/watchdog"
)

// shared is what every kind of one Setup call shares: the first Kind's
// fields below its Controller.
type shared[P client.Object, K comparable, C any] struct {
	dial             func(ctx context.Context, key K) (C, error)
	poolOptions      clientpool.Options[K, C]
	pool             *clientpool.Pool[K, C]
	secretName       func(parent P) string
	classifier       *errclass.Classifier
	clock            clock.Clock
	recordsNamespace string
	keySecret        string
	eventSource      string
	watchNamespaces  bool
	holdOptions      hold.Config
	watchdogOptions  watchdog.Options
	checkInterval    time.Duration
	sweepOptions     sweep.Options
	designated       Designated
	createLanding    time.Duration
}

func (k Kind[O, P, K, C]) shared() shared[P, K, C] {
	return shared[P, K, C]{
		dial: k.Dial, poolOptions: k.PoolOptions, pool: k.Pool, secretName: k.SecretName, classifier: k.Classifier,
		clock: k.Clock, recordsNamespace: k.RecordsNamespace, keySecret: k.KeySecret, eventSource: k.EventSource,
		watchNamespaces: k.WatchNamespaces, holdOptions: k.HoldOptions, watchdogOptions: k.WatchdogOptions, checkInterval: k.CheckInterval,
		sweepOptions: k.SweepOptions, designated: k.Designated, createLanding: k.CreateLanding,
	}
}

// set names the shared fields a Kind sets.
func (s shared[P, K, C]) set() []string {
	return setFields(map[string]bool{
		"Dial": s.dial != nil, "PoolOptions": !isZero(s.poolOptions), "Pool": s.pool != nil,
		"SecretName": s.secretName != nil, "Classifier": s.classifier != nil, "Clock": s.clock != nil,
		"RecordsNamespace": s.recordsNamespace != "", "KeySecret": s.keySecret != "", "EventSource": s.eventSource != "",
		"WatchNamespaces": s.watchNamespaces, "HoldOptions": !isZero(s.holdOptions), "WatchdogOptions": !isZero(s.watchdogOptions),
		"CheckInterval": s.checkInterval != 0, "SweepOptions": !isZero(s.sweepOptions), "Designated": s.designated != nil,
		"CreateLanding": s.createLanding != 0,
	})
}

// redirected are the reasons of the Events that still go somewhere when
// their object's namespace is terminating (it refuses new Events): to the
// records namespace, naming the object. A parent's and a dependent's
// release by the hold and a cleanup the watchdog sees stuck are what
// someone looking back at a namespace deletion needs; the rest (Deleted,
// the conditions' transitions) is dropped, quietly.
var redirected = []string{hold.ReasonReleased, hold.ReasonReleasedWithoutDelete, watchdog.ReasonCleanupBlocked}

// member is one kind of a Setup call, its type parameter O hidden.
type member[P client.Object, K comparable, C any] struct {
	kind      string
	group     string // the kind's API group
	finalizer string
	skip      Guarantee
	object    client.Object
	// parentName is Kind.ParentName on client.Objects; nil when not given.
	parentName func(client.Object) string
	// connector is the adapter's ParentConnector; nil when it has none.
	connector ParentConnector[K]
	prove     func(ctx context.Context, c C, q ledger.Question) (ledger.Answer, error)
	// classifier is Options.Classifier: nil or the shared one.
	classifier *errclass.Classifier
	shared     shared[P, K, C]
	// reconciler builds the kind's reconciler over w's parts.
	reconciler func(w *wiring[P, K, C]) (built, error)
}

// built is a kind's reconciler, ready to register.
type built struct {
	r       reconcile.Reconciler
	setup   func() error
	targets func(d Designated, newParent func() client.Object) (sweep.Targets, error)
}

func (m *member[P, K, C]) needs(g Guarantee) bool { return m.skip&g == 0 }

func (k Kind[O, P, K, C]) member(mgr ctrl.Manager, s *runtime.Scheme) (*member[P, K, C], error) {
	newObj, err := factory[O]("the managed kind O")
	if err != nil {
		return nil, err
	}
	gvk, err := apiutil.GVKForObject(newObj(), s)
	if err != nil {
		return nil, fmt.Errorf("%w: Kind %T: %w (add it to the manager's scheme)", ErrConfig, newObj(), err)
	}
	m := &member[P, K, C]{kind: gvk.Kind, group: gvk.Group, finalizer: k.Options.Finalizer, skip: k.Options.Skip, object: newObj(), classifier: k.Options.Classifier, shared: k.shared()}
	where := "Kind[" + m.kind + "]"
	if k.Adapter == nil {
		return nil, fmt.Errorf("%w: %s.Adapter is required", ErrConfig, where)
	}
	if m.finalizer == "" {
		if gvk.Group == "" {
			return nil, fmt.Errorf("%w: %s.Options.Finalizer is required for a kind of the core API group (no group to name it after)", ErrConfig, where)
		}
		m.finalizer = gvk.Group + finalizerSuffix
	}
	if m.needs(SkipHold) && k.ParentName == nil {
		return nil, fmt.Errorf("%w: %s.ParentName is required with a hold: return the name of the parent the object references (what Adapter.Connect reads), or name SkipHold in Options.Skip", ErrConfig, where)
	}
	if set := k.Options.owned(); len(set) > 0 {
		return nil, fmt.Errorf("%w: %s.Options.%s: Setup fills them with the parts it builds; leave them unset (or wire by hand with New)", ErrConfig, where, strings.Join(set, ", "))
	}
	// The reconciler's own checks (status convention, policy, intervals)
	// run now, on a stand-in pool and without the parts, so that a bad
	// kind is refused before anything is created or registered.
	dry := k.Options
	dry.Finalizer, dry.Scheme, dry.Skip, dry.Classifier = m.finalizer, s, Unprotected, nil
	if _, err := New[O, K, C](mgr.GetClient(), newObj, k.Adapter, noPool[K, C]{}, dry); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if pn := k.ParentName; pn != nil {
		m.parentName = func(o client.Object) string {
			if obj, ok := o.(O); ok {
				return pn(obj)
			}
			return ""
		}
	}
	m.connector, _ = parentConnector[K](k.Adapter)
	if m.needs(SkipLedger) && !authenticator[K](k.Adapter) && !k.UnauthenticatedNeverSwept {
		return nil, fmt.Errorf("%w: %s.Adapter does not implement Authenticator (Authentication; with AdapterFuncs, AuthenticationFn), so the sweeper could never use its connections "+
			"and every record whose owner goes without its delete would be kept for ever: implement it, saying what authenticates the service, "+
			"or set %s.UnauthenticatedNeverSwept to accept that such leftovers stay until an admin removes them", ErrConfig, where, where)
	}
	if k.UnauthenticatedNeverSwept && authenticator[K](k.Adapter) {
		return nil, fmt.Errorf("%w: %s.UnauthenticatedNeverSwept is set, but the Adapter implements Authenticator: unset it", ErrConfig, where)
	}
	m.prove = k.Adapter.Prove
	m.reconciler = func(w *wiring[P, K, C]) (built, error) {
		o := k.Options
		o.Finalizer, o.Scheme, o.APIReader, o.Clock, o.Recorder = m.finalizer, s, w.mgr.GetAPIReader(), w.clock, w.recorder
		if m.needs(SkipLedger) {
			o.Ledger = w.parts.Ledger
		}
		if m.needs(SkipHold) {
			o.Hold = w.parts.Hold
		}
		if m.needs(SkipWatchdog) {
			o.Watchdog = w.parts.Watchdog
		}
		r, err := New[O, K, C](w.mgr.GetClient(), newObj, k.Adapter, w.parts.Pool, o)
		if err != nil {
			return built{}, fmt.Errorf("%s: %w", where, err)
		}
		r.namespaceCache = w.namespaces
		return built{r: r, setup: func() error { return r.SetupWithManager(w.mgr, k.Controller) }, targets: r.sweepTargets}, nil
	}
	return m, nil
}

// noPool stands in for the pool while a kind's options are checked; it is
// never called.
type noPool[K comparable, C any] struct{}

func (noPool[K, C]) Do(context.Context, K, func(context.Context, C) error) error {
	return errors.New("lifecycle: no pool")
}

// owned names the Options fields Setup fills that o sets.
func (o Options) owned() []string {
	return setFields(map[string]bool{
		"Scheme": o.Scheme != nil, "Ledger": o.Ledger != nil, "Hold": o.Hold != nil, "Watchdog": o.Watchdog != nil,
		"Recorder": o.Recorder != nil, "APIReader": o.APIReader != nil, "Clock": o.Clock != nil,
	})
}

// wiring is one Setup call: the shared configuration, its kinds, and the
// parts as they are built.
type wiring[P client.Object, K comparable, C any] struct {
	mgr        ctrl.Manager
	scheme     *runtime.Scheme
	s          shared[P, K, C]
	members    []*member[P, K, C]
	newParent  func() P               // nil when no kind needs the parent kind
	store      *ledger.ConfigMapStore // nil when no kind has records
	classifier *errclass.Classifier
	clock      clock.Clock
	recorder   Recorder
	namespaces client.Reader // the cache's Namespaces with WatchNamespaces, else nil
	parts      Parts[K, C]
}

// plan checks the whole configuration, building nothing.
func plan[O, P client.Object, K comparable, C any](mgr ctrl.Manager, kind Kind[O, P, K, C], more []Sibling[P, K, C]) (*wiring[P, K, C], error) {
	w := &wiring[P, K, C]{mgr: mgr, scheme: mgr.GetScheme(), parts: Parts[K, C]{Reconcilers: map[string]reconcile.Reconciler{}}}
	if w.scheme == nil {
		return nil, fmt.Errorf("%w: the manager has no scheme", ErrConfig)
	}
	first, err := kind.member(mgr, w.scheme)
	if err != nil {
		return nil, err
	}
	w.s, w.members = first.shared, []*member[P, K, C]{first}
	for i, sib := range more {
		if sib == nil {
			return nil, fmt.Errorf("%w: kind %d given to Setup is nil", ErrConfig, i+2)
		}
		m, err := sib.member(mgr, w.scheme)
		if err != nil {
			return nil, err
		}
		if set := m.shared.set(); len(set) > 0 {
			return nil, fmt.Errorf("%w: Kind[%s] sets %s, which the kinds of one Setup share: set them on the first kind (%s) only", ErrConfig, m.kind, strings.Join(set, ", "), first.kind)
		}
		if slices.ContainsFunc(w.members, func(o *member[P, K, C]) bool { return o.kind == m.kind }) {
			return nil, fmt.Errorf("%w: Kind[%s] is given to Setup twice", ErrConfig, m.kind)
		}
		w.members = append(w.members, m)
	}
	if err := w.check(); err != nil {
		return nil, err
	}
	w.clock = w.s.clock
	if w.clock == nil {
		w.clock = clock.RealClock{}
	}
	return w, nil
}

// needed reports whether some kind needs g.
func (w *wiring[P, K, C]) needed(g Guarantee) bool {
	return slices.ContainsFunc(w.members, func(m *member[P, K, C]) bool { return m.needs(g) })
}

// check checks the shared fields against what the kinds need.
func (w *wiring[P, K, C]) check() error {
	s := w.s
	switch {
	case s.pool != nil && (s.dial != nil || !isZero(s.poolOptions)):
		return fmt.Errorf("%w: Kind.Pool is an existing pool: give it, or Dial and PoolOptions to build one, not both", ErrConfig)
	case s.pool == nil && s.dial == nil && s.poolOptions.Dial == nil:
		return fmt.Errorf("%w: Kind.Dial is required: the function making a client for a pool key (or give an existing *clientpool.Pool in Kind.Pool)", ErrConfig)
	case s.dial != nil && s.poolOptions.Dial != nil:
		return fmt.Errorf("%w: Kind.Dial and Kind.PoolOptions.Dial are both set: give one", ErrConfig)
	case s.pool != nil && s.classifier != nil && s.pool.Classifier() != s.classifier:
		return fmt.Errorf("%w: Kind.Classifier differs from the classifier Kind.Pool evicts with: leave Kind.Classifier nil (the pool's is then used everywhere), or build the pool with it", ErrConfig)
	case s.checkInterval < 0:
		return fmt.Errorf("%w: Kind.CheckInterval %s is negative; zero is watchdog.DefaultCheckInterval", ErrConfig, s.checkInterval)
	case s.createLanding < 0:
		return fmt.Errorf("%w: Kind.CreateLanding %s is negative; zero is the call timeout", ErrConfig, s.createLanding)
	}
	if err := s.watchdogOptions.Validate(); err != nil {
		return fmt.Errorf("%w: Kind.WatchdogOptions: %w", ErrConfig, err)
	}
	h, wd, sw, po := s.holdOptions, s.watchdogOptions, s.sweepOptions, s.poolOptions
	for _, c := range []struct {
		what string
		set  []string
	}{
		{"PoolOptions", setFields(map[string]bool{"Classifier": po.Classifier != nil, "Clock": po.Clock != nil})},
		{"HoldOptions", setFields(map[string]bool{
			"Parent": h.Parent != nil, "Scheme": h.Scheme != nil, "SecretName": h.SecretName != nil, "Dependents": h.Dependents != nil,
			"Clock": h.Clock != nil, "Recorder": h.Recorder != nil, "Classifier": h.Classifier != nil, "Live": h.Live != nil,
		})},
		{"WatchdogOptions", setFields(map[string]bool{"Clock": wd.Clock != nil, "Recorder": wd.Recorder != nil, "Classifier": wd.Classifier != nil, "Scheme": wd.Scheme != nil})},
		{"SweepOptions", setFields(map[string]bool{
			"Ledger": sw.Ledger != nil, "Owners": sw.Owners != nil, "Live": sw.Live != nil, "Targets": sw.Targets != nil,
			"Recorder": sw.Recorder != nil, "Clock": sw.Clock != nil, "Classifier": sw.Classifier != nil,
		})},
	} {
		if len(c.set) > 0 {
			return fmt.Errorf("%w: Kind.%s.%s: Setup fills them (from Kind.Clock and Kind.Classifier, the manager, and the parts it builds); leave them unset", ErrConfig, c.what, strings.Join(c.set, ", "))
		}
	}
	if w.needed(SkipHold) || w.needed(SkipLedger) {
		newParent, err := factory[P]("the parent kind P")
		if err != nil {
			return err
		}
		if _, err := apiutil.GVKForObject(newParent(), w.scheme); err != nil {
			return fmt.Errorf("%w: the parent kind %T: %w (add it to the manager's scheme)", ErrConfig, newParent(), err)
		}
		w.newParent = newParent
	}
	if w.needed(SkipHold) && s.secretName == nil {
		return fmt.Errorf("%w: Kind.SecretName is required with a hold: return the name of the parent's credential Secret, \"\" for a parent without one", ErrConfig)
	}
	for _, m := range w.members {
		if m.classifier != nil && m.classifier != w.effectiveClassifier() {
			return fmt.Errorf("%w: Kind[%s].Options.Classifier differs from the one the pool evicts with: give the classifier once, in the first Kind's Classifier, and leave Options.Classifier nil", ErrConfig, m.kind)
		}
	}
	for i, m := range w.members {
		if m.connector != nil {
			continue
		}
		switch {
		case m.needs(SkipLedger):
			return fmt.Errorf("%w: Kind[%s].Adapter does not implement ParentConnector (ConnectParent; with AdapterFuncs, ConnectParentFn): the sweeper of its records has only their parent to connect from", ErrConfig, m.kind)
		case i == 0 && w.needed(SkipHold) && s.holdOptions.Access == nil:
			return fmt.Errorf("%w: Kind[%s].Adapter does not implement ParentConnector (ConnectParent; with AdapterFuncs, ConnectParentFn), which the hold's access check connects from: implement it, or give Kind.HoldOptions.Access", ErrConfig, m.kind)
		}
	}
	// The parts' own checks, on what they will be built from.
	if w.needed(SkipHold) {
		if _, err := hold.New(w.holdConfig()); err != nil {
			return fmt.Errorf("%w: Kind.HoldOptions: %w", ErrConfig, err)
		}
	}
	if w.needed(SkipLedger) {
		store, err := ledger.NewConfigMapStore(ledger.ReadWriter{Reader: w.mgr.GetAPIReader(), Writer: w.mgr.GetClient()}, s.recordsNamespace)
		if err != nil {
			return fmt.Errorf("%w: Kind.RecordsNamespace: %w", ErrConfig, err)
		}
		w.store = store
		dry := s.sweepOptions
		dry.Ledger, dry.Owners, dry.Live, dry.Targets = &ledger.Ledger{}, w.mgr.GetCache(), w.mgr.GetAPIReader(), sweep.ByKind{}
		if _, err := sweep.New(dry); err != nil {
			return fmt.Errorf("%w: Kind.SweepOptions: %w", ErrConfig, err)
		}
	}
	return nil
}

// createBounds are a create's call timeout and the service's landing bound
// after it (Kind.CreateLanding, the call timeout when unset).
func (w *wiring[P, K, C]) createBounds() (call, landing time.Duration) {
	call = cmp.Or(w.s.poolOptions.CallTimeout, DefaultCallTimeout)
	if w.s.pool != nil {
		call = w.s.pool.CallTimeout()
	}
	return call, cmp.Or(w.s.createLanding, call)
}

// effectiveClassifier is the classifier the pool will evict with.
func (w *wiring[P, K, C]) effectiveClassifier() *errclass.Classifier {
	switch {
	case w.s.pool != nil:
		return w.s.pool.Classifier()
	case w.s.classifier != nil:
		return w.s.classifier
	}
	return errclass.Default
}

// build builds the parts and registers them with the manager.
func (w *wiring[P, K, C]) build(ctx context.Context) (*Parts[K, C], error) {
	s, first := w.s, w.members[0]
	if err := w.pool(first.kind); err != nil {
		return nil, err
	}
	if w.store != nil {
		rw := ledger.ReadWriter{Reader: w.mgr.GetAPIReader(), Writer: w.mgr.GetClient()}
		key, err := ledger.LoadKey(ctx, rw, w.store.Namespace(), s.keySecret)
		if err != nil {
			return nil, fmt.Errorf("lifecycle: the operator key: %w", err)
		}
		call, landing := w.createBounds()
		// Twice the call timeout: the record write before the create may
		// take up to one call timeout and still leave the create its whole
		// call (the ledger does not send a create left less than half).
		if w.parts.Ledger, err = ledger.New(w.store, ledger.Options{Key: key, Clock: w.clock, Classifier: w.classifier, CreateTimeout: 2 * call, CreateLanding: landing}); err != nil {
			return nil, fmt.Errorf("lifecycle: %w", err)
		}
	}
	source := s.eventSource
	if source == "" {
		source = "finale-" + strings.ToLower(first.kind)
	}
	eo := eventrec.Options{Redirect: redirected}
	if w.store != nil {
		eo.Fallback = w.store.Namespace()
	}
	if s.watchNamespaces {
		if err := eventrec.Informer(ctx, w.mgr); err != nil {
			return nil, fmt.Errorf("lifecycle: %w", err)
		}
		eo.Namespaces = w.mgr.GetCache()
		w.namespaces = w.mgr.GetCache()
	}
	rec, err := eventrec.For(w.mgr, source, eo)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	w.recorder, w.parts.Recorder = rec, rec
	if w.needed(SkipWatchdog) {
		o := s.watchdogOptions
		o.Clock, o.Recorder, o.Classifier, o.Scheme = w.clock, rec, w.classifier, w.scheme
		if o.Conditions == nil {
			o.Conditions = watchdog.StatusConditions{Reader: w.mgr.GetAPIReader(), Status: w.mgr.GetClient()}
		}
		w.parts.Watchdog = watchdog.New(o)
	}
	if w.needed(SkipHold) {
		if err := w.hold(); err != nil {
			return nil, err
		}
	}
	kinds := make([]built, 0, len(w.members))
	for _, m := range w.members {
		b, err := m.reconciler(w)
		if err != nil {
			return nil, err
		}
		kinds = append(kinds, b)
		w.parts.Reconcilers[m.kind] = b.r
	}
	for _, b := range kinds {
		if err := b.setup(); err != nil {
			return nil, err
		}
	}
	if wd := w.parts.Watchdog; wd != nil {
		if err := w.mgr.Add(wd.Runnable(s.checkInterval, w.mgr.GetAPIReader())); err != nil {
			return nil, fmt.Errorf("lifecycle: add the watchdog: %w", err)
		}
	}
	if w.parts.Ledger != nil {
		if err := w.sweeper(kinds, w.store.Namespace()); err != nil {
			return nil, err
		}
	}
	return &w.parts, nil
}

// pool builds the pool, or takes the given one, and settles the one
// classifier: the pool's.
func (w *wiring[P, K, C]) pool(kind string) error {
	s := w.s
	if s.pool != nil {
		w.parts.Pool = s.pool
	} else {
		o := s.poolOptions
		if s.dial != nil {
			o.Dial = clientpool.DialFn[K, C](s.dial)
		}
		if o.Name == "" {
			o.Name = strings.ToLower(kind)
		}
		if o.CallTimeout == 0 {
			o.CallTimeout = DefaultCallTimeout
		}
		if o.IdleTimeout == 0 {
			o.IdleTimeout = DefaultIdleTimeout
		}
		if o.Close == nil {
			o.Close = clientpool.CloseFn[C](closeOwn[C])
		}
		o.Classifier, o.Clock = s.classifier, w.clock
		p, err := clientpool.New(o)
		if err != nil {
			return fmt.Errorf("%w: Kind.PoolOptions: %w", ErrConfig, err)
		}
		w.parts.Pool = p
	}
	w.classifier = w.parts.Pool.Classifier()
	w.parts.Classifier = w.classifier
	return nil
}

// closeOwn closes a client with its own Close() error, when it has one: a
// client dropped from the pool unclosed leaks its connections.
func closeOwn[C any](c C) error {
	if cl, ok := any(c).(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// holdConfig is the hold's configuration but for its access check.
func (w *wiring[P, K, C]) holdConfig() hold.Config {
	s := w.s
	cfg := s.holdOptions
	cfg.Parent, cfg.Scheme, cfg.Clock, cfg.Recorder, cfg.Classifier = w.newParent(), w.scheme, w.clock, w.recorder, w.classifier
	secretName := s.secretName
	cfg.SecretName = func(p client.Object) string {
		if parent, ok := p.(P); ok {
			return secretName(parent)
		}
		return ""
	}
	for _, m := range w.members {
		if m.needs(SkipHold) {
			cfg.Dependents = append(cfg.Dependents, hold.Dependent{Object: m.object, ParentName: m.parentName, CleanupFinalizer: m.finalizer})
		}
	}
	return cfg
}

// hold builds the hold on the parent kind for every kind that needs one.
func (w *wiring[P, K, C]) hold() error {
	cfg, first := w.holdConfig(), w.members[0]
	if cfg.Access == nil {
		keyID := ""
		if w.parts.Ledger != nil {
			keyID = w.parts.Ledger.KeyID()
		}
		cfg.Access = proofAccess(w.parts.Pool, w.classifier, first.connector, first.prove, keyID)
	}
	h, err := hold.New(cfg)
	if err != nil {
		return fmt.Errorf("%w: Kind.HoldOptions: %w", ErrConfig, err)
	}
	w.parts.Hold = h
	return nil
}

// proofAccess is the hold's default access check: a proof through the pool
// from the parent alone, as the sweeper will connect. It asks without
// enrolling, so it creates nothing: an answer (even "no sentinel for this
// key") means the service is reached with a working client; a dial that
// fails (credentials missing, say), or a Transport, Auth or Identity error, means it
// is not.
func proofAccess[K comparable, C any](pool Pool[K, C], cl *errclass.Classifier, pc ParentConnector[K], prove func(context.Context, C, ledger.Question) (ledger.Answer, error), keyID string) hold.Access {
	return hold.AccessFn(func(ctx context.Context, parent client.Object) (bool, error) {
		key, err := pc.ConnectParent(ctx, parent)
		if err != nil {
			return false, err
		}
		called := false
		err = pool.Do(ctx, key, func(ctx context.Context, c C) error {
			called = true
			_, err := prove(ctx, c, ledger.Question{KeyID: keyID, Challenge: challenge()})
			return err
		})
		if accessReady(ctx, cl, called, err) {
			return true, nil
		}
		if err == nil {
			err = errors.New("lifecycle: the access proof was not called")
		}
		return false, err
	})
}

// accessReady is the proof's verdict: the call ran on a client (the dial
// worked) and its error, if any, says nothing against the client.
func accessReady(ctx context.Context, cl *errclass.Classifier, called bool, err error) bool {
	if !called {
		return false
	}
	switch cl.Classify(ctx, err) {
	case errclass.Transport, errclass.Auth, errclass.Identity, errclass.Canceled:
		return false
	}
	return true
}

// challenge is fresh random hex, so that no answer can come from memory.
func challenge() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// sweeper builds the sweeper over the records of every kind that has
// them, and adds it to the manager.
func (w *wiring[P, K, C]) sweeper(kinds []built, records string) error {
	s := w.s
	designated := s.designated
	if designated == nil {
		list, err := listOf(w.scheme, w.newParent())
		if err != nil {
			return err
		}
		rd := w.mgr.GetClient()
		designated = func(ctx context.Context) ([]client.Object, error) {
			l := list()
			if err := rd.List(ctx, l, client.InNamespace(records)); err != nil {
				return nil, fmt.Errorf("lifecycle: list the sweeper's parents in %s: %w", records, err)
			}
			return items(l), nil
		}
	}
	newParent := func() client.Object { return w.newParent() }
	targets := sweep.ByKind{}
	for i, m := range w.members {
		if !m.needs(SkipLedger) {
			continue
		}
		t, err := kinds[i].targets(designated, newParent)
		if err != nil {
			return fmt.Errorf("Kind[%s]: %w", m.kind, err)
		}
		targets[m.kind] = t
	}
	owners := ownerCache{Reader: w.mgr.GetCache(), typed: map[k8sschema.GroupKind]func() client.Object{}}
	for _, m := range w.members {
		obj := m.object
		owners.typed[k8sschema.GroupKind{Group: m.group, Kind: m.kind}] = func() client.Object { return obj.DeepCopyObject().(client.Object) }
	}
	o := s.sweepOptions
	o.Ledger, o.Owners, o.Live, o.Targets = w.parts.Ledger, owners, w.mgr.GetAPIReader(), targets
	o.Recorder, o.Clock, o.Classifier = w.recorder, w.clock, w.classifier
	sw, err := sweep.New(o)
	if err != nil {
		return fmt.Errorf("%w: Kind.SweepOptions: %w", ErrConfig, err)
	}
	w.parts.Sweeper = sw
	if err := w.mgr.Add(sw); err != nil {
		return fmt.Errorf("lifecycle: add the sweeper: %w", err)
	}
	return nil
}

// factory returns a function making a new empty T, which must be a
// pointer to a struct.
func factory[T client.Object](what string) (func() T, error) {
	var zero T
	t := reflect.TypeOf(zero)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: %s must be a pointer to a struct (*v1alpha1.Thing), not %v", ErrConfig, what, t)
	}
	return func() T { return reflect.New(t.Elem()).Interface().(T) }, nil
}

// setFields returns the names whose flag is set, sorted.
func setFields(fields map[string]bool) []string {
	var set []string
	for name, isSet := range fields {
		if isSet {
			set = append(set, name)
		}
	}
	slices.Sort(set)
	return set
}

// isZero reports whether v is its type's zero value (func and map fields
// included, which == cannot compare).
func isZero(v any) bool { return reflect.ValueOf(v).IsZero() }

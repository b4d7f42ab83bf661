package check_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/check"
)

// The deletion defects finale check found in real operators (issue 39),
// each rebuilt as a toy owner the way it was built there, with a naive
// build that breaks the experiment that found it and a careful build that
// holds it. The toys are ConfigMaps managed by an in-process manager (as
// TestResultsStalled's): no CRD of their own, and an external service
// (toyService) living in this process, so that it outlives the operator's
// "kills" (a cancelled context) as a real service outlives a SIGKILL.

const (
	patFinalizer = "toy.example.com/cleanup"
	patOwner     = "toy.example.com/pattern-owner" // label of the dependents
	patRetry     = 200 * time.Millisecond          // how soon a waiting reconcile looks again
)

// toyService is the toys' external service: resources by name.
type toyService struct {
	// latency is how long a create takes: the moment a crash between the
	// operator's mark and its create falls in (0: at once).
	latency time.Duration

	mu  sync.Mutex // guards res
	res map[string]bool
}

func newToyService(latency time.Duration) *toyService {
	return &toyService{latency: latency, res: map[string]bool{}}
}

// create makes name, idempotently (the name is the identity, as an
// owner-tagged resource's tag is); a context ended before the service
// answered made nothing, as a connection cut by a SIGKILL.
func (s *toyService) create(ctx context.Context, name string) error {
	if s.latency > 0 {
		t := time.NewTimer(s.latency)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res[name] = true
	return nil
}

func (s *toyService) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res[name]
}

func (s *toyService) delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.res, name)
}

// list is the description's probe.
func (s *toyService) list(context.Context, check.Values) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.res {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// extName is the external resource a dependent makes: unique per run,
// since each run has a namespace of its own.
func extName(o client.Object) string { return "ext/" + o.GetNamespace() + "/" + o.GetName() }

// patManager is the manager of every toy: the core kinds only.
func patManager(e check.OperatorEnv) (ctrl.Manager, error) {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	return ctrl.NewManager(e.Config, ctrl.Options{
		Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Logger: logr.Discard(),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
}

var patOwners = builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[patOwner] != "" }))

// patSpec is the description every toy shares; each sets its own world
// and timeouts.
func patSpec(name string, start check.StartFunc, svc *toyService) *check.Spec {
	return &check.Spec{
		Name:     name,
		Operator: check.Operator{Start: start, Grace: metav1Duration(5 * time.Second)},
		// Unused by the toys; check installs CRDs before anything.
		CRDs: []string{"../examples/keys/config/crd/keys.finale.dev_apikeys.yaml"},
		// check requires a fault point; the toys' service is in this
		// process and nothing dials this address (the experiments chosen
		// fault no transport).
		Faults: []check.FaultPoint{{Name: "toy", Address: "127.0.0.1:9"}},
		Dependents: check.Dependents{Count: 2,
			Template: `{apiVersion: v1, kind: ConfigMap, metadata: {name: dep-{{.Index}}, labels: {` + patOwner + `: conn}}}`},
		Probe: check.Probe{Func: svc.list},
	}
}

// patCheck runs spec with only the experiments named, quick, seed 1, and
// returns the report with its text for failure messages.
func patCheck(t *testing.T, spec *check.Spec, opts check.Options) (check.Report, string) {
	t.Helper()
	opts.Quick, opts.Seed, opts.Progress, opts.WorkDir = true, 1, testLog{t}, t.TempDir()
	rep, err := check.Run(t.Context(), spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	_ = rep.WriteText(&b)
	return rep, b.String()
}

// wantPattern asserts the verdicts, for each experiment that broke the
// invariants its single run broke, and that the report names what was
// left behind as the finished violation lists it (KIND NAME [FINALIZERS]).
func wantPattern(t *testing.T, rep check.Report, text string, want map[string]check.Verdict, inv map[string][]check.Invariant, mention string) {
	t.Helper()
	if mention != "" && !strings.Contains(text, mention) {
		t.Errorf("the report does not name %s:\n%s", mention, text)
	}
	if diff := cmp.Diff(want, rep.Verdicts()); diff != "" {
		t.Fatalf("verdicts (-want +got):\n%s\n%s", diff, text)
	}
	for _, e := range rep.Experiments {
		var got []check.Invariant
		for _, r := range e.Runs {
			for _, v := range r.Violations {
				got = append(got, v.Invariant)
			}
		}
		if diff := cmp.Diff(inv[e.Name], got); diff != "" {
			t.Errorf("%s: violations (-want +got):\n%s\n%s", e.Name, diff, text)
		}
	}
}

// pattern is one toy owner, run naive and careful through one experiment:
// the naive build must break the experiment with exactly broke (and the
// report name mention), the careful one hold it.
type pattern struct {
	name       string
	start      func(svc *toyService, careful bool) check.StartFunc
	latency    time.Duration // the toy service's per create
	parent     *check.Parent // nil: patSpec's
	experiment string
	killWindow time.Duration
	ready      time.Duration // zero: check's default
	broke      []check.Invariant
	mention    string
	// also, when set, asserts more of either build's report.
	also func(t *testing.T, rep check.Report, text string, careful bool)
}

func runPattern(t *testing.T, p pattern) {
	for _, careful := range []bool{false, true} {
		t.Run(map[bool]string{false: "naive", true: "careful"}[careful], func(t *testing.T) {
			svc := newToyService(p.latency)
			spec := patSpec(p.name, p.start(svc, careful), svc)
			if p.parent != nil {
				spec.Parent = *p.parent
			}
			spec.Timeouts = check.Timeouts{Ready: metav1Duration(p.ready), Finish: metav1Duration(patFinish)}
			rep, text := patCheck(t, spec, check.Options{Only: []string{p.experiment}, KillWindow: p.killWindow})
			want := map[string]check.Verdict{p.experiment: check.Held}
			var inv map[string][]check.Invariant
			mention := ""
			if !careful {
				want[p.experiment] = check.Broke
				inv = map[string][]check.Invariant{p.experiment: p.broke}
				mention = p.mention
			}
			wantPattern(t, rep, text, want, inv, mention)
			if p.also != nil {
				p.also(t, rep, text, careful)
			}
		})
	}
}

// --- 1. A tracking object made before the deletion is looked at.

// trackingToy connects to its service the way the operator found did: the
// connect step records its use in a new tracking object in the owner's
// namespace, every reconcile, and only then looks at the deletion. In a
// terminating namespace the API refuses every create, so the naive build
// never reaches its cleanup: the finalizer stays, the namespace stays
// Terminating for ever and the external resource leaks. The careful build
// looks at the deletion first, and its cleanup makes nothing in the
// namespace.
type trackingToy struct {
	c       client.Client
	svc     *toyService
	careful bool
}

func (t trackingToy) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var o corev1.ConfigMap
	if err := t.c.Get(ctx, req.NamespacedName, &o); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	deleting := o.DeletionTimestamp != nil
	if !t.careful || !deleting {
		if err := t.connect(ctx, &o); err != nil {
			return reconcile.Result{}, err // Forbidden in a terminating namespace, every retry
		}
	}
	if deleting {
		if !controllerutil.ContainsFinalizer(&o, patFinalizer) {
			return reconcile.Result{}, nil
		}
		t.svc.delete(extName(&o))
		patch := client.MergeFrom(o.DeepCopy())
		controllerutil.RemoveFinalizer(&o, patFinalizer)
		return reconcile.Result{}, client.IgnoreNotFound(t.c.Patch(ctx, &o, patch))
	}
	if !controllerutil.ContainsFinalizer(&o, patFinalizer) {
		patch := client.MergeFrom(o.DeepCopy())
		controllerutil.AddFinalizer(&o, patFinalizer)
		return reconcile.Result{}, t.c.Patch(ctx, &o, patch)
	}
	return reconcile.Result{}, t.svc.create(ctx, extName(&o))
}

// connect records a use of the service: a new object per call, owned by
// the owner so that the garbage collector takes it with the owner.
func (t trackingToy) connect(ctx context.Context, o *corev1.ConfigMap) error {
	use := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, GenerateName: o.Name + "-use-"}}
	if err := controllerutil.SetOwnerReference(o, use, t.c.Scheme()); err != nil {
		return err
	}
	return t.c.Create(ctx, use)
}

func startTracking(svc *toyService, careful bool) check.StartFunc {
	return func(ctx context.Context, e check.OperatorEnv) error {
		mgr, err := patManager(e)
		if err != nil {
			return err
		}
		if err := ctrl.NewControllerManagedBy(mgr).Named("toy-tracking").For(&corev1.ConfigMap{}, patOwners).
			Complete(trackingToy{c: mgr.GetClient(), svc: svc, careful: careful}); err != nil {
			return err
		}
		return mgr.Start(ctx)
	}
}

// order-all-at-once found it: the naive build's owners are left
// Terminating with their external resources; deleted one by one before
// the namespace (order-dependents-first) the same build holds, which is
// why the defect hid from tests that delete objects, not namespaces.
func TestPatternTrackingInTerminatingNamespace(t *testing.T) {
	runPattern(t, pattern{
		name: "toy-tracking", start: startTracking, experiment: check.OrderAllAtOnce,
		broke:   []check.Invariant{check.Finished, check.NoLeak},
		mention: "ConfigMap dep-0 [" + patFinalizer + "]", // left behind, with its cleanup finalizer
	})
}

// --- 2. A create-pending marker a crash leaves behind.

const (
	patPending = "toy.example.com/create-pending" // set before the create
	patCreated = "toy.example.com/created"        // the resource made, set after
)

// pendingToy marks "create pending" on the owner before it creates, so
// that a second worker does not create twice, and records the resource
// once made. The naive build reads the marker as a lock: a pending create
// is someone else's, to be waited for. A SIGKILL between the mark and the
// create leaves a marker nobody will clear: the restarted operator waits
// on it for ever, creating (ready) and deleting (finished) alike. The
// careful build reads the marker as a record of what may have been made:
// it adopts the resource if the service has it, else creates it.
type pendingToy struct {
	c       client.Client
	svc     *toyService
	careful bool
}

func (p pendingToy) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var o corev1.ConfigMap
	if err := p.c.Get(ctx, req.NamespacedName, &o); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	name := extName(&o)
	pending := o.Annotations[patPending] != "" && o.Annotations[patCreated] == ""
	if pending && !p.careful {
		return reconcile.Result{RequeueAfter: patRetry}, nil // "another worker is creating it"
	}
	if o.DeletionTimestamp != nil {
		if !controllerutil.ContainsFinalizer(&o, patFinalizer) {
			return reconcile.Result{}, nil
		}
		p.svc.delete(name)
		patch := client.MergeFrom(o.DeepCopy())
		controllerutil.RemoveFinalizer(&o, patFinalizer)
		return reconcile.Result{}, client.IgnoreNotFound(p.c.Patch(ctx, &o, patch))
	}
	if !controllerutil.ContainsFinalizer(&o, patFinalizer) {
		patch := client.MergeFrom(o.DeepCopy())
		controllerutil.AddFinalizer(&o, patFinalizer)
		return reconcile.Result{}, p.c.Patch(ctx, &o, patch)
	}
	if o.Annotations[patCreated] != "" {
		return reconcile.Result{}, nil
	}
	if !pending { // careful and pending: the mark is there already
		patch := client.MergeFrom(o.DeepCopy())
		metav1.SetMetaDataAnnotation(&o.ObjectMeta, patPending, name)
		if err := p.c.Patch(ctx, &o, patch); err != nil {
			return reconcile.Result{}, err
		}
	}
	// The careful build's adoption: a crash after the service made it
	// and before the record leaves it made, under the marked name.
	if !p.svc.has(name) {
		if err := p.svc.create(ctx, name); err != nil {
			return reconcile.Result{}, err
		}
	}
	patch := client.MergeFrom(o.DeepCopy())
	metav1.SetMetaDataAnnotation(&o.ObjectMeta, patCreated, name)
	return reconcile.Result{}, p.c.Patch(ctx, &o, patch)
}

func startPending(svc *toyService, careful bool) check.StartFunc {
	return func(ctx context.Context, e check.OperatorEnv) error {
		mgr, err := patManager(e)
		if err != nil {
			return err
		}
		if err := ctrl.NewControllerManagedBy(mgr).Named("toy-pending").For(&corev1.ConfigMap{}, patOwners).
			Complete(pendingToy{c: mgr.GetClient(), svc: svc, careful: careful}); err != nil {
			return err
		}
		return mgr.Start(ctx)
	}
}

// kill-during-creates found it. Each create takes the service a second
// (pendingLatency), so the two creates fill most of the kills' window and
// seed 1's kills fall between a mark and its create: the naive build
// never becomes ready and its owners never finish; the careful one holds.
// The window is given (not measured: no first all-at-once run here), as a
// reproduction gives it.
const pendingLatency = time.Second

func TestPatternPendingMarkerAfterCrash(t *testing.T) {
	runPattern(t, pattern{
		name: "toy-pending", start: startPending, latency: pendingLatency,
		experiment: check.KillDuringCreates, killWindow: 2 * pendingLatency, ready: patReady,
		broke:   []check.Invariant{check.Ready, check.Finished},
		mention: "[" + patFinalizer + "]", // an owner left behind, waiting on its marker
		also: func(t *testing.T, rep check.Report, _ string, _ bool) {
			if r := rep.Experiments[0].Runs[0]; r.Kills != 2 {
				t.Errorf("kills = %d, want 2 (quick)", r.Kills)
			}
		},
	})
}

// --- 3. A parent finalizer each dependent keeps for the other.

// The toys' bounds: a careful build ends as soon as its namespace goes, so
// they cost only the naive builds' waits, and they leave the namespace
// controller room on 2 cores shared by make test's four jobs (15 s
// failed a careful run there).
const (
	patReady  = 30 * time.Second
	patFinish = 45 * time.Second
)

const patInUse = "toy.example.com/in-use" // the connection's finalizer, while dependents use it

// connUserToy is the dependents' reconciler. The connection (the parent,
// a ConfigMap named conn) carries patInUse while dependents use it. The
// naive build releases it from the dependents' cleanup: a dependent
// deciding, as its external delete starts, that another dependent still
// uses the connection leaves the finalizer to that one. Two dependents deleted
// together each decide so for the other, both go, and the connection's
// finalizer stays: the namespace never goes. The careful build does not
// release the connection from a dependent at all: the connection's own
// reconciler (connToy) does, once a live list shows no dependent left.
type connUserToy struct {
	c       client.Client
	svc     *toyService
	careful bool
}

// patDeleteTime is how long the naive build's external delete takes,
// counted from the deletion's start (whole seconds: the timestamp's).
const patDeleteTime = 3 * time.Second

// patDecision is the naive cleanup's decision, recorded between its two
// steps as the operator found kept it in status.
const patDecision = "toy.example.com/release-connection"

func (u connUserToy) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var o corev1.ConfigMap
	if err := u.c.Get(ctx, req.NamespacedName, &o); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if o.DeletionTimestamp == nil {
		if !controllerutil.ContainsFinalizer(&o, patFinalizer) {
			patch := client.MergeFrom(o.DeepCopy())
			controllerutil.AddFinalizer(&o, patFinalizer)
			return reconcile.Result{}, u.c.Patch(ctx, &o, patch)
		}
		return reconcile.Result{}, u.svc.create(ctx, extName(&o))
	}
	if !controllerutil.ContainsFinalizer(&o, patFinalizer) {
		return reconcile.Result{}, nil
	}
	if u.careful {
		u.svc.delete(extName(&o))
	} else {
		decision, decided := o.Annotations[patDecision]
		if !decided {
			var deps corev1.ConfigMapList
			if err := u.c.List(ctx, &deps, client.InNamespace(o.Namespace), client.MatchingLabels{patOwner: o.Labels[patOwner]}); err != nil {
				return reconcile.Result{}, err
			}
			decision = "release"
			for _, d := range deps.Items {
				if d.Name != o.Name {
					decision = "keep" // the other one still uses it: it will release it
				}
			}
			patch := client.MergeFrom(o.DeepCopy())
			metav1.SetMetaDataAnnotation(&o.ObjectMeta, patDecision, decision)
			return reconcile.Result{}, client.IgnoreNotFound(u.c.Patch(ctx, &o, patch))
		}
		// The external delete takes a while, as a cloud's does, and the
		// decision came before it: two dependents deleted together both
		// decide while the other is still there. (With an instant delete
		// the first could be gone before the second decided, on a loaded
		// machine, and the second would release the connection.)
		if left := patDeleteTime - time.Since(o.DeletionTimestamp.Time); left > 0 {
			return reconcile.Result{RequeueAfter: left}, nil
		}
		u.svc.delete(extName(&o))
		if decision == "release" {
			if err := releaseConn(ctx, u.c, client.ObjectKey{Namespace: o.Namespace, Name: o.Labels[patOwner]}); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	patch := client.MergeFrom(o.DeepCopy())
	controllerutil.RemoveFinalizer(&o, patFinalizer)
	return reconcile.Result{}, client.IgnoreNotFound(u.c.Patch(ctx, &o, patch))
}

func releaseConn(ctx context.Context, c client.Client, key client.ObjectKey) error {
	var conn corev1.ConfigMap
	if err := c.Get(ctx, key, &conn); err != nil {
		return client.IgnoreNotFound(err)
	}
	patch := client.MergeFrom(conn.DeepCopy())
	if !controllerutil.RemoveFinalizer(&conn, patInUse) {
		return nil
	}
	return client.IgnoreNotFound(c.Patch(ctx, &conn, patch))
}

// connToy is the careful build's connection reconciler: the one place
// that releases the connection, from a live list (not the cache, which
// may still show a dependent gone, or miss one just made).
type connToy struct {
	c    client.Client
	live client.Reader
}

func (c connToy) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var conn corev1.ConfigMap
	if err := c.c.Get(ctx, req.NamespacedName, &conn); err != nil || conn.DeletionTimestamp == nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var deps corev1.ConfigMapList
	if err := c.live.List(ctx, &deps, client.InNamespace(conn.Namespace), client.MatchingLabels{patOwner: conn.Name}); err != nil {
		return reconcile.Result{}, err
	}
	if len(deps.Items) > 0 {
		return reconcile.Result{}, nil // each one's going enqueues the connection again
	}
	return reconcile.Result{}, releaseConn(ctx, c.c, req.NamespacedName)
}

func startConn(svc *toyService, careful bool) check.StartFunc {
	return func(ctx context.Context, e check.OperatorEnv) error {
		mgr, err := patManager(e)
		if err != nil {
			return err
		}
		if err := ctrl.NewControllerManagedBy(mgr).Named("toy-conn-user").For(&corev1.ConfigMap{}, patOwners).
			Complete(connUserToy{c: mgr.GetClient(), svc: svc, careful: careful}); err != nil {
			return err
		}
		if careful {
			conns := predicate.NewPredicateFuncs(func(o client.Object) bool { return controllerutil.ContainsFinalizer(o, patInUse) })
			toConn := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				if n := o.GetLabels()[patOwner]; n != "" {
					return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: n}}}
				}
				return nil
			})
			if err := ctrl.NewControllerManagedBy(mgr).Named("toy-conn").For(&corev1.ConfigMap{}, builder.WithPredicates(conns)).
				Watches(&corev1.ConfigMap{}, toConn).
				Complete(connToy{c: mgr.GetClient(), live: mgr.GetAPIReader()}); err != nil {
				return err
			}
		}
		return mgr.Start(ctx)
	}
}

// order-all-at-once found it: the namespace controller deletes both
// dependents at once, each leaves the connection's release to the other,
// and the connection stays Terminating with patInUse; the external
// resources are gone (no leak), the namespace is not. The careful build
// holds.
func TestPatternParentFinalizerKeptForTheOther(t *testing.T) {
	runPattern(t, pattern{
		name: "toy-conn", start: startConn, experiment: check.OrderAllAtOnce,
		// The operator would add patInUse when the first dependent uses
		// the connection; the template carries it to keep the toy to the
		// release, where the defect is.
		parent: &check.Parent{
			Secret: `{apiVersion: v1, kind: Secret, metadata: {name: conn-login}}`,
			Object: `{apiVersion: v1, kind: ConfigMap, metadata: {name: conn, finalizers: [` + patInUse + `]}}`,
		},
		broke:   []check.Invariant{check.Finished},
		mention: "ConfigMap conn [" + patInUse + "]", // the connection, left behind
		// The dependents went, the connection stayed: the report blames
		// the connection's own release, not the experiment's fault (the
		// namespace's order), and gives no fix for it.
		also: func(t *testing.T, rep check.Report, text string, careful bool) {
			if run := rep.Experiments[0].Runs[0]; !careful && (!strings.Contains(run.Cause, "ConfigMap conn ("+patInUse+")") || strings.Contains(text, "  fix: ")) {
				t.Errorf("cause %q, want the connection blamed and no fix line:\n%s", run.Cause, text)
			}
		},
	})
}

// listRun is a probe that lists only the run's own resources (those of
// its owner namespace): what a description running in lanes asserts.
func (s *toyService) listRun(ctx context.Context, v check.Values) ([]string, error) {
	all, err := s.list(ctx, v)
	return slices.DeleteFunc(all, func(n string) bool { return !strings.HasPrefix(n, "ext/"+v.Namespace+"/") }), err
}

package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/hold"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

type widgetKind = lifecycle.Kind[*Widget, *corev1.ConfigMap, string, *Conn]

// offlineManager is a manager that is never started: Setup's checks run
// before anything reaches the API server.
func offlineManager(t *testing.T) ctrl.Manager {
	t.Helper()
	s := runtime.NewScheme()
	s.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(s, widgetGV)
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// widgetAdapter is a complete adapter that is never called.
func widgetAdapter() lifecycle.AdapterFuncs[*Widget, string, *Conn] {
	return lifecycle.AdapterFuncs[*Widget, string, *Conn]{
		ConnectParentFn:  func(context.Context, client.Object) (string, error) { return "k", nil },
		AuthenticationFn: func(string) string { return "in memory: no network path" },
	}
}

func dialConn(context.Context, string) (*Conn, error) { return &Conn{}, nil }

// A complete Kind: every guarantee, nothing but the required fields.
func completeKind() widgetKind {
	return widgetKind{
		Adapter: widgetAdapter(), Dial: dialConn,
		ParentName: func(w *Widget) string { return w.Spec.Parent },
		SecretName: func(p *corev1.ConfigMap) string { return p.Data["secret"] },
	}
}

// Configuration Setup cannot work with is refused before anything is built,
// with ErrConfig and a message that says what to fix.
func TestSetupRejectsBadConfiguration(t *testing.T) {
	other := errclass.New()
	pool, err := clientpool.New(clientpool.Options[string, *Conn]{Name: "setup-rejects", Dial: clientpool.DialFn[string, *Conn](dialConn), Classifier: errclass.New()})
	if err != nil {
		t.Fatal(err)
	}
	with := func(f func(k *widgetKind)) widgetKind {
		k := completeKind()
		f(&k)
		return k
	}
	cases := map[string]struct {
		kind    widgetKind
		more    []lifecycle.Sibling[*corev1.ConfigMap, string, *Conn]
		wantErr string
	}{
		"no adapter":      {kind: with(func(k *widgetKind) { k.Adapter = nil }), wantErr: "Kind[Widget].Adapter is required"},
		"no dial or pool": {kind: with(func(k *widgetKind) { k.Dial = nil }), wantErr: "Kind.Dial is required"},
		"dial and pool":   {kind: with(func(k *widgetKind) { k.Pool = pool }), wantErr: "not both"},
		"dial twice": {kind: with(func(k *widgetKind) {
			k.PoolOptions.Dial = clientpool.DialFn[string, *Conn](dialConn)
		}), wantErr: "give one"},
		"no parent name": {kind: with(func(k *widgetKind) { k.ParentName = nil }), wantErr: "ParentName is required with a hold"},
		"no secret name": {kind: with(func(k *widgetKind) { k.SecretName = nil }), wantErr: "SecretName is required with a hold"},
		"adapter cannot connect from a parent": {kind: with(func(k *widgetKind) {
			k.Adapter = lifecycle.AdapterFuncs[*Widget, string, *Conn]{AuthenticationFn: func(string) string { return "" }}
		}), wantErr: "does not implement ParentConnector"},
		"adapter says nothing of authentication": {kind: with(func(k *widgetKind) {
			a := widgetAdapter()
			a.AuthenticationFn = nil
			k.Adapter = a
		}), wantErr: "Kind[Widget].Adapter does not implement Authenticator"},
		"never swept, yet authenticated": {kind: with(func(k *widgetKind) { k.UnauthenticatedNeverSwept = true }),
			wantErr: "Kind[Widget].UnauthenticatedNeverSwept is set, but the Adapter implements Authenticator"},
		"classifier differs from the given pool's": {kind: with(func(k *widgetKind) {
			k.Dial, k.Pool, k.Classifier = nil, pool, other
		}), wantErr: "Kind.Classifier differs"},
		"reconciler classifier differs": {kind: with(func(k *widgetKind) {
			k.Classifier, k.Options.Classifier = errclass.New(), other
		}), wantErr: "Options.Classifier differs"},
		"pool classifier given apart": {kind: with(func(k *widgetKind) { k.PoolOptions.Classifier = other }),
			wantErr: "PoolOptions.Classifier: Setup fills them"},
		"a part given": {kind: with(func(k *widgetKind) { k.Options.Ledger = &ledger.Ledger{} }), wantErr: "Options.Ledger: Setup fills them"},
		"hold's parent given": {kind: with(func(k *widgetKind) { k.HoldOptions.Parent = &corev1.ConfigMap{} }),
			wantErr: "HoldOptions.Parent: Setup fills them"},
		"negative hold timeout": {kind: with(func(k *widgetKind) { k.HoldOptions.Timeout = -time.Second }), wantErr: "negative"},
		"negative retry":        {kind: with(func(k *widgetKind) { k.Options.RetryInterval = -time.Second }), wantErr: "must not be negative"},
		"unknown policy":        {kind: with(func(k *widgetKind) { k.Options.DefaultPolicy = "Orphan" }), wantErr: "Orphan"},
		"sibling sets shared fields": {kind: completeKind(), more: []lifecycle.Sibling[*corev1.ConfigMap, string, *Conn]{completeKind()},
			wantErr: "Kind[Widget] sets Dial, SecretName, which the kinds of one Setup share"},
		"kind given twice": {kind: completeKind(), more: []lifecycle.Sibling[*corev1.ConfigMap, string, *Conn]{widgetKind{
			Adapter: widgetAdapter(), ParentName: func(w *Widget) string { return w.Spec.Parent },
		}}, wantErr: "given to Setup twice"},
	}
	t.Setenv(ledger.NamespaceEnv, "")
	cases["no records namespace"] = struct {
		kind    widgetKind
		more    []lifecycle.Sibling[*corev1.ConfigMap, string, *Conn]
		wantErr string
	}{kind: completeKind(), wantErr: "Kind.RecordsNamespace: ledger: no namespace for cleanup records"}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := lifecycle.Setup(t.Context(), offlineManager(t), tc.kind, tc.more...)
			if !errors.Is(err, lifecycle.ErrConfig) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Setup = %v, want ErrConfig saying %q", err, tc.wantErr)
			}
		})
	}
}

// An adapter that does not say what authenticates its connections gets a
// sweeper that can never act for its kind: Setup refuses it, naming the
// option, and accepts it only with Kind.UnauthenticatedNeverSwept set. A
// kind without records (SkipLedger) has nothing to sweep and needs neither.
func TestSetupUnauthenticatedAdapterNeedsItsOption(t *testing.T) {
	unauthenticated := widgetAdapter()
	unauthenticated.AuthenticationFn = nil
	k := completeKind()
	k.Adapter = unauthenticated
	k.RecordsNamespace = "finale-system"
	_, err := lifecycle.Setup(t.Context(), offlineManager(t), k)
	if !errors.Is(err, lifecycle.ErrConfig) || !strings.Contains(err.Error(), "UnauthenticatedNeverSwept") {
		t.Fatalf("Setup without an Authenticator = %v, want ErrConfig naming UnauthenticatedNeverSwept", err)
	}

	// With the option the configuration is accepted: what fails then is
	// reaching the offline manager's API server (the operator key is read
	// live), never the configuration. A short deadline bounds that.
	k.UnauthenticatedNeverSwept = true
	k.Controller.SkipNameValidation = true
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := lifecycle.Setup(ctx, offlineManager(t), k); errors.Is(err, lifecycle.ErrConfig) {
		t.Fatalf("Setup with UnauthenticatedNeverSwept = %v, want the configuration accepted", err)
	}

	skip := completeKind()
	skip.Adapter = unauthenticated
	skip.Options.Skip = lifecycle.SkipLedger | lifecycle.SkipHold
	skip.Controller.SkipNameValidation = true
	if _, err := lifecycle.Setup(t.Context(), offlineManager(t), skip); err != nil {
		t.Fatalf("Setup of a kind without records = %v, want no need for an Authenticator", err)
	}
}

// A kind of the core group has no group to name its finalizer after.
func TestSetupCoreKindNeedsAFinalizer(t *testing.T) {
	_, err := lifecycle.Setup(t.Context(), offlineManager(t), lifecycle.Kind[*corev1.ConfigMap, *corev1.ConfigMap, string, *Conn]{
		Adapter: lifecycle.AdapterFuncs[*corev1.ConfigMap, string, *Conn]{}, Dial: dialConn, Options: lifecycle.Options{Skip: lifecycle.Unprotected},
	})
	if !errors.Is(err, lifecycle.ErrConfig) || !strings.Contains(err.Error(), "Options.Finalizer is required for a kind of the core API group") {
		t.Errorf("Setup = %v, want ErrConfig asking for a finalizer", err)
	}
}

// Without guarantees (the naive build of comparisons) Setup needs no API
// server: it builds the pool, with the one classifier, and the reconciler.
func TestSetupUnprotected(t *testing.T) {
	own := errclass.New()
	parts, err := lifecycle.Setup(t.Context(), offlineManager(t), widgetKind{
		Adapter: lifecycle.AdapterFuncs[*Widget, string, *Conn]{}, Dial: dialConn, Classifier: own,
		Options:    lifecycle.Options{Skip: lifecycle.Unprotected},
		Controller: lifecycle.SetupOptions{SkipNameValidation: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if parts.Pool == nil || parts.Pool.Classifier() != own || parts.Classifier != own {
		t.Errorf("the pool or the parts do not use the given classifier")
	}
	if parts.Ledger != nil || parts.Hold != nil || parts.Watchdog != nil || parts.Sweeper != nil {
		t.Errorf("parts built for skipped guarantees: %+v", parts)
	}
	if _, ok := parts.Reconcilers["Widget"].(*lifecycle.Reconciler[*Widget, string, *Conn]); !ok {
		t.Errorf("Reconcilers = %v, want the Widget reconciler", parts.Reconcilers)
	}
}

// AdapterFuncs connects the sweeper from a parent through ConnectParentFn,
// and every call of a sweep target goes through the pool; without it,
// sweeping is refused at configuration.
func TestSweepTargetsWithAdapterFuncs(t *testing.T) {
	s := runtime.NewScheme()
	s.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "uid-db"}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(parent).Build()
	h, err := hold.New(hold.Config{
		Parent: &corev1.ConfigMap{}, Scheme: s, SecretName: func(client.Object) string { return "" },
		Dependents: []hold.Dependent{{Object: &Widget{}, CleanupFinalizer: "x/y", ParentName: func(client.Object) string { return "db" }}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var dialled []string
	pool, err := clientpool.New(clientpool.Options[string, *Conn]{Name: "sweep-adapterfuncs", Dial: clientpool.DialFn[string, *Conn](func(_ context.Context, key string) (*Conn, error) {
		dialled = append(dialled, key)
		return &Conn{}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	adapter := lifecycle.AdapterFuncs[*Widget, string, *Conn]{
		ProveFn: func(context.Context, *Conn, ledger.Question) (ledger.Answer, error) {
			return ledger.Answer{Deployment: "d"}, nil
		},
	}
	newReconciler := func(a lifecycle.AdapterFuncs[*Widget, string, *Conn]) *lifecycle.Reconciler[*Widget, string, *Conn] {
		r, err := lifecycle.New(c, func() *Widget { return &Widget{} }, a, pool, lifecycle.Options{
			Finalizer: "x/y", Scheme: s, Hold: h, APIReader: c, Skip: lifecycle.SkipLedger | lifecycle.SkipWatchdog,
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	if _, err := newReconciler(adapter).SweepTargets(nil); !errors.Is(err, lifecycle.ErrConfig) || !strings.Contains(err.Error(), "ConnectParentFn") {
		t.Fatalf("SweepTargets without ConnectParentFn = %v, want ErrConfig naming ConnectParentFn", err)
	}
	adapter.ConnectParentFn = func(_ context.Context, p client.Object) (string, error) { return "key-of-" + p.GetName(), nil }
	targets, err := newReconciler(adapter).SweepTargets(nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &ledger.Record{Via: &ledger.ConnectionRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "db", UID: "uid-db"}}
	cands, err := targets.Targets(t.Context(), rec)
	if err != nil || len(cands) != 1 {
		t.Fatalf("Targets = %v, %v; want the record's own parent", cands, err)
	}
	if _, err := cands[0].Target.Prove(t.Context(), ledger.Question{}); err != nil {
		t.Fatal(err)
	}
	if len(dialled) != 1 || dialled[0] != "key-of-db" {
		t.Errorf("dialled %v, want the parent's key through the pool", dialled)
	}
}

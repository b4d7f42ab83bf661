package brownfield_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/temporal/api/v1alpha1"
	adopted "github.com/finale-dev/finale/examples/temporal/brownfield/adopted"
	naive "github.com/finale-dev/finale/examples/temporal/brownfield/naive"
	"github.com/finale-dev/finale/examples/temporal/config/crd"
	"github.com/finale-dev/finale/examples/temporal/controller"
	"github.com/finale-dev/finale/examples/temporal/stack"
	"github.com/finale-dev/finale/faultinject"
	"github.com/finale-dev/finale/internal/temporalbin"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/lifecycle"
)

// Production settings and what the runs are held to.
const (
	// sdkCallTimeout is the Temporal SDK's default per-call timeout (its
	// defaultRPCTimeout in go.temporal.io/sdk v1.51.0), which the
	// brownfield builds leave as it is: their calls run without a
	// deadline of their own.
	sdkCallTimeout = 10 * time.Second
	// sdkKeepalive is the SDK's default keepalive: a PING after 30 s
	// without a frame, the connection closed 15 s later without its ack.
	// A frozen connection heals by itself after it; a stalled one never.
	sdkKeepalive = 30*time.Second + 15*time.Second
	// wedge is how long after the fault the naive builds must still be
	// stuck: past three keepalive rounds.
	wedge = 150 * time.Second
	// slack is allowed beyond the bounds for dials, the few calls of the
	// cleanup and the API server, on a shared two-core machine.
	slack = 5 * time.Second
	// cleanupFailed is the start of the brownfield builds' log message for
	// a failed cleanup attempt.
	cleanupFailed = "failed to clean up the server-side deployment"
)

// Names the runs give what they create.
const (
	secretName     = "temporal-api-key"
	connectionName = "temporal"
	identity       = "brownfield-controller"
)

// env is what the runs share: the package's control plane and Temporal
// server, and a harness client of each that bypasses the fault proxies.
type env struct {
	cfg      *rest.Config
	c        client.Client
	ts       *temporalbin.Server
	temporal sdkclient.Client
}

// outcome is one build's deletion after the fault.
type outcome struct {
	finished bool
	elapsed  time.Duration // from the fault to the object gone, or to the end of the watch
	redials  int64         // connections the build opened after the fault
	pings    int64         // keepalive PINGs the stalled connection answered
	failed   int64         // failed cleanup attempts (brownfield) or failed calls (example operator)
}

// TestProductionSettings runs four builds side by side, each in a
// namespace of its own with its own fault proxy, at production settings:
// the SDK's default 10 s call timeout and a 10 s requeue (the brownfield
// controllers), the example operator at its defaults (10 s call timeout,
// lifecycle's retry spacing). In each, once the deployment is Ready with a
// version, the established connection is stalled (PINGs answered, nothing
// else) and the object deleted.
//
//   - brownfield/adopted finishes within one call timeout and one requeue;
//   - brownfield/naive is still stuck 150 s after the fault, past the SDK's
//     keepalive, without a single new connection;
//   - the example operator finishes within one call timeout and its first
//     retry; its naive build is stuck like brownfield/naive.
//
// The figures it logs are the README's (go test -v -run
// TestProductionSettings ./brownfield/).
func TestProductionSettings(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	got := map[string]outcome{}
	record := func(name string, o outcome) {
		mu.Lock()
		defer mu.Unlock()
		got[name] = o
	}
	runs := []struct {
		name string
		run  func(t *testing.T) outcome
	}{
		{"brownfield-adopted", func(t *testing.T) outcome {
			o := runBrownfield(t, e, buildAdopted, sdkCallTimeout+adopted.RequeueAfter+slack, true)
			if o.redials < 1 {
				t.Errorf("%d new connections after the fault, want at least 1 (the evicted client's replacement)", o.redials)
			}
			return o
		}},
		{"brownfield-naive", func(t *testing.T) outcome {
			o := runBrownfield(t, e, buildNaive, wedge, false)
			checkWedged(t, o)
			if o.failed < 3 {
				t.Errorf("%d failed cleanup attempts logged, want at least 3 (one per call timeout and requeue)", o.failed)
			}
			return o
		}},
		{"example-operator", func(t *testing.T) outcome {
			// One call timeout, then lifecycle's first retry (1 s).
			return runExample(t, e, false, controller.DefaultCallTimeout+time.Second+slack, true)
		}},
		{"example-operator-naive", func(t *testing.T) outcome {
			o := runExample(t, e, true, wedge, false)
			checkWedged(t, o)
			return o
		}},
	}
	t.Run("builds", func(t *testing.T) {
		for _, r := range runs {
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				record(r.name, r.run(t))
			})
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "at production settings, from the fault:\n")
	for _, r := range runs {
		o, ok := got[r.name]
		if !ok {
			continue
		}
		state := fmt.Sprintf("finished in %s", o.elapsed.Round(100*time.Millisecond))
		if !o.finished {
			state = fmt.Sprintf("still stuck after %s", o.elapsed.Round(time.Second))
		}
		fmt.Fprintf(&b, "  %-24s %s; %d new connections, %d keepalive PINGs answered, %d failed\n", r.name, state, o.redials, o.pings, o.failed)
	}
	t.Log(b.String())
}

// checkWedged holds a naive build to the seed: still stuck past the
// keepalive, on the same connection, which answered its PINGs.
func checkWedged(t *testing.T, o outcome) {
	t.Helper()
	if o.finished {
		t.Errorf("the naive build finished the deletion after %s: the fault proves nothing", o.elapsed)
	}
	if o.elapsed < wedge || wedge < 3*sdkKeepalive {
		t.Errorf("watched for %s, want at least %s and past three keepalives (%s)", o.elapsed, wedge, 3*sdkKeepalive)
	}
	if o.redials != 0 {
		t.Errorf("%d new connections after the fault, want 0: the naive build never evicts on this path", o.redials)
	}
	if o.pings < 2 {
		t.Errorf("%d keepalive PINGs answered on the stalled connection, want at least 2: keepalive saw it alive", o.pings)
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ts := testenv.Temporal(t)
	cfg := testenv.ControlPlane(t).Config
	c, err := client.New(cfg, client.Options{Scheme: stack.Scheme()})
	must(t, err)
	crds, err := crd.CRDs()
	must(t, err)
	must(t, controlplane.InstallCRDs(t.Context(), c, crds...))
	harness, err := sdkclient.DialContext(t.Context(), sdkclient.Options{
		HostPort: ts.HostPort, Namespace: ts.Namespace, Identity: "brownfield-harness",
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	must(t, err)
	t.Cleanup(harness.Close)
	return &env{cfg: cfg, c: c, ts: ts, temporal: harness}
}

// build wires one brownfield controller into mgr and returns what closes
// its clients.
type build func(mgr ctrl.Manager) (closeClients func() error, err error)

func buildAdopted(mgr ctrl.Manager) (func() error, error) {
	r, err := adopted.New(mgr, identity)
	if err != nil {
		return nil, err
	}
	return r.TemporalClientPool.Close, r.SetupWithManager(mgr)
}

func buildNaive(mgr ctrl.Manager) (func() error, error) {
	r, err := naive.New(mgr, identity)
	if err != nil {
		return nil, err
	}
	return r.TemporalClientPool.Close, r.SetupWithManager(mgr)
}

// runBrownfield runs one brownfield build in a fresh namespace: a Secret,
// a Connection through a fault proxy, a WorkerDeployment, Ready with one
// version; then the fault and the deletion, watched for at most bound.
func runBrownfield(t *testing.T, e *env, b build, bound time.Duration, wantFinished bool) outcome {
	ctx := t.Context()
	ns := testenv.Namespace(t, e.c)
	proxy, err := faultinject.NewHTTP2Proxy(e.ts.HostPort)
	must(t, err)
	var failed atomic.Int64
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, cleanupFailed) {
			failed.Add(1)
		}
	}, funcr.Options{})
	mgr, err := manager.New(e.cfg, manager.Options{
		Scheme: stack.Scheme(), Logger: logger,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	must(t, err)
	closeClients, err := b(mgr)
	must(t, err)
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		// The clients before the proxy: its Close waits for the stalled
		// connections, which closing their clients ends.
		if err := closeClients(); err != nil {
			t.Errorf("close clients: %v", err)
		}
		if err := proxy.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})

	must(t, e.c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName},
		Data:       map[string][]byte{v1alpha1.DefaultAPIKeySecretKey: []byte(stack.APIKey)},
	}))
	must(t, e.c.Create(ctx, &v1alpha1.Connection{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: connectionName},
		Spec:       v1alpha1.ConnectionSpec{HostPort: proxy.Addr(), APIKeySecretRef: v1alpha1.SecretKeySelector{Name: secretName}, Plaintext: true},
	}))
	w := &v1alpha1.WorkerDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.WorkerDeploymentSpec{
			ConnectionRef: v1alpha1.ConnectionReference{Name: connectionName}, TemporalNamespace: e.ts.Namespace, DeploymentName: ns + "-app",
		},
	}
	must(t, e.c.Create(ctx, w))
	must(t, controlplane.WaitFor(ctx, stack.DefaultWait, "the WorkerDeployment to be Ready", func(ctx context.Context) (bool, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(w.Status.Conditions, v1alpha1.ConditionReady), nil
	}))
	must(t, stack.AddVersion(ctx, e.temporal, e.ts.Namespace, w.Spec.DeploymentName, "v1"))

	o := faultAndDelete(t, e.c, w, proxy, bound, wantFinished)
	o.failed = failed.Load()
	checkServerSide(t, e, w.Spec.DeploymentName, o.finished)
	return o
}

// runExample runs examples/temporal/controller's operator (either build)
// at its production defaults in a fresh namespace, as runBrownfield does.
func runExample(t *testing.T, e *env, naiveBuild bool, bound time.Duration, wantFinished bool) outcome {
	ctx := t.Context()
	ns := testenv.Namespace(t, e.c)
	s, err := stack.Start(ctx, stack.Options{
		Config: e.cfg, HostPort: e.ts.HostPort, Namespace: e.ts.Namespace, Naive: naiveBuild,
		CallTimeout: controller.DefaultCallTimeout, RetryInterval: lifecycle.DefaultRetryInterval,
		RateLimiter: lifecycle.DefaultRateLimiter(), WatchNamespace: ns,
		PoolName: fmt.Sprintf("production-naive-%t", naiveBuild),
	})
	must(t, err)
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	must(t, s.Connection(ctx, ns))
	must(t, s.APIKeySecret(ctx, ns))
	w, err := s.WorkerDeployment(ctx, ns, "app")
	must(t, err)
	_, err = s.WaitCondition(ctx, w, lifecycle.ConditionReady, metav1.ConditionTrue, lifecycle.ReasonAvailable)
	must(t, err)
	must(t, s.AddVersion(ctx, w.Spec.DeploymentName, "v1"))

	dials := s.Op.Dials()
	_, failed := s.Op.Calls()
	o := faultAndDelete(t, s.C, w, s.Proxy, bound, wantFinished)
	_, failedAfter := s.Op.Calls()
	o.failed = failedAfter - failed
	if got := s.Op.Dials() - dials; got != o.redials {
		t.Errorf("%d dials after the fault but %d new connections", got, o.redials)
	}
	checkServerSide(t, e, w.Spec.DeploymentName, o.finished)
	return o
}

// faultAndDelete stalls every established connection through proxy,
// deletes w and watches it for at most bound: until it is gone when
// wantFinished, for the whole bound otherwise. A stuck object is released
// (finalizers removed) at the end.
func faultAndDelete(t *testing.T, c client.Client, w *v1alpha1.WorkerDeployment, proxy *faultinject.Proxy, bound time.Duration, wantFinished bool) outcome {
	t.Helper()
	ctx := t.Context()
	accepted := proxy.Accepted()
	n, err := proxy.Stall()
	must(t, err)
	if n < 1 {
		t.Fatalf("stalled %d connections, want the controller's", n)
	}
	t0 := time.Now()
	must(t, c.Delete(ctx, w))
	var o outcome
	if wantFinished {
		err := controlplane.WaitGone(ctx, c, w, bound)
		o.finished, o.elapsed = err == nil, time.Since(t0)
		if err != nil {
			t.Errorf("the deletion did not finish within %s of the fault: %v", bound, err)
		}
	} else {
		o.finished, o.elapsed = watch(t, c, w, t0.Add(bound))
	}
	o.redials, o.pings = proxy.Accepted()-accepted, proxy.PingsAnswered()
	if !o.finished {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		must(t, client.IgnoreNotFound(c.Patch(ctx, w, patch)))
	}
	return o
}

// watch looks at w once a second until end or until it is gone, and
// reports whether it went and when it stopped looking.
func watch(t *testing.T, c client.Client, w *v1alpha1.WorkerDeployment, end time.Time) (bool, time.Duration) {
	t.Helper()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	t0 := time.Now()
	for {
		err := c.Get(t.Context(), client.ObjectKeyFromObject(w), &v1alpha1.WorkerDeployment{})
		switch {
		case apierrors.IsNotFound(err):
			return true, time.Since(t0)
		case err != nil:
			t.Fatalf("get %s: %v", w.Name, err)
		case !time.Now().Before(end):
			return false, time.Since(t0)
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// checkServerSide checks the server-side deployment through the harness's
// own client: gone after a finished deletion, still there (with its
// version) after a stuck one.
func checkServerSide(t *testing.T, e *env, name string, finished bool) {
	t.Helper()
	d, err := e.temporal.WorkerDeploymentClient().GetHandle(name).Describe(t.Context(), sdkclient.WorkerDeploymentDescribeOptions{})
	var nf *serviceerror.NotFound
	switch {
	case finished && !errors.As(err, &nf):
		t.Errorf("the deployment after a finished deletion: %v, want NotFound", err)
	case !finished && err != nil:
		t.Errorf("the deployment after a stuck deletion: %v, want it still there", err)
	case !finished && len(d.Info.VersionSummaries) != 1:
		t.Errorf("the deployment after a stuck deletion has %d versions, want its 1", len(d.Info.VersionSummaries))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package check_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/examples/keys/service"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // the reports say what happened
	os.Exit(m.Run())
}

const toyToken = "toy-token-0123456789"

// forgetful is an operator written the way many are: it keeps the IDs of
// the keys it made in memory, so a restart forgets them. After a crash it
// makes every key again (duplicates) and never deletes the first ones
// (leaks).
type forgetful struct {
	c  client.Client
	kc *keyclient.Client

	mu  sync.Mutex // guards ids
	ids map[types.UID]string
}

const toyFinalizer = "toy.example.com/cleanup"

func (f *forgetful) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var k v1alpha1.APIKey
	if err := f.c.Get(ctx, req.NamespacedName, &k); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	tag := "toy:" + string(k.UID)
	f.mu.Lock()
	id, known := f.ids[k.UID]
	f.mu.Unlock()
	if !k.DeletionTimestamp.IsZero() {
		if known {
			if err := f.kc.Delete(ctx, id, tag); err != nil {
				return reconcile.Result{}, err
			}
		}
		controllerutil.RemoveFinalizer(&k, toyFinalizer)
		return reconcile.Result{}, client.IgnoreNotFound(f.c.Update(ctx, &k))
	}
	if controllerutil.AddFinalizer(&k, toyFinalizer) {
		return reconcile.Result{}, f.c.Update(ctx, &k)
	}
	if known {
		return reconcile.Result{}, nil
	}
	key, err := f.kc.Create(ctx, tag, service.KeySpec{Name: k.Spec.Name})
	if err != nil {
		return reconcile.Result{}, err
	}
	f.mu.Lock()
	f.ids[k.UID] = key.ID
	f.mu.Unlock()
	return reconcile.Result{}, nil
}

// startForgetful is the spec's Start: a manager in this process, its key
// client through the fault proxy.
func startForgetful(ctx context.Context, e check.OperatorEnv) error {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, Logger: logr.Discard(),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	addr, err := e.Values.Proxy("keys")
	if err != nil {
		return err
	}
	kc, err := keyclient.New("http://"+addr, toyToken, keyclient.Options{})
	if err != nil {
		return err
	}
	defer kc.Close()
	f := &forgetful{c: mgr.GetClient(), kc: kc, ids: map[types.UID]string{}}
	if err := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.APIKey{}).Named("toy").Complete(f); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// The engine catches what it is for, through the Go API (an in-process
// Start, a probe function): an operator that keeps its state in memory
// holds when nothing happens to it and, killed during its creates, makes
// its keys twice and leaks the first ones; both invariants are named.
func TestForgetfulOperator(t *testing.T) {
	svc, err := service.Start("", service.Options{Token: toyToken, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	spec := &check.Spec{
		Name:     "forgetful",
		Operator: check.Operator{Start: startForgetful, Grace: metav1Duration(5 * time.Second)},
		CRDs:     []string{"../examples/keys/config/crd/keys.finale.dev_apikeys.yaml", "../examples/keys/config/crd/keys.finale.dev_keyservers.yaml"},
		Faults:   []check.FaultPoint{{Name: "keys", Address: svc.Addr()}},
		Parent: check.Parent{
			Secret: "{apiVersion: v1, kind: Secret, metadata: {name: token}, stringData: {token: " + toyToken + "}}",
			Object: `{apiVersion: keys.finale.dev/v1alpha1, kind: KeyServer, metadata: {name: keys}, spec: {url: "http://{{.Proxy "keys"}}", tokenSecretRef: {name: token}}}`,
		},
		Dependents: check.Dependents{Count: 2, Template: "{apiVersion: keys.finale.dev/v1alpha1, kind: APIKey, metadata: {name: k{{.Index}}}, spec: {name: k{{.Index}}, keyServerRef: {name: keys}}}"},
		Probe: check.Probe{Func: func(context.Context, check.Values) ([]string, error) {
			var out []string
			for _, k := range svc.Keys() {
				out = append(out, k.ID+" "+k.Tag)
			}
			return out, nil
		}},
		Timeouts: check.Timeouts{Finish: metav1Duration(20 * time.Second)},
	}
	rep, err := check.Run(t.Context(), spec, check.Options{Quick: true, Seed: 3, Only: []string{check.OrderDependentsFirst, check.KillDuringCreates}, Progress: testLog{t}, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			_ = rep.WriteText(&b)
			t.Log(b.String())
		}
	})
	want := map[string]check.Verdict{check.OrderDependentsFirst: check.Held, check.KillDuringCreates: check.Broke}
	if diff := cmp.Diff(want, rep.Verdicts()); diff != "" {
		t.Fatalf("verdicts (-want +got):\n%s", diff)
	}
	run := rep.Experiments[1].Runs[0]
	var got []check.Invariant
	for _, v := range run.Violations {
		got = append(got, v.Invariant)
	}
	if diff := cmp.Diff([]check.Invariant{check.NoLeak, check.NoDuplicate}, got); diff != "" {
		t.Errorf("violations of kill-during-creates (-want +got):\n%s", diff)
	}
	if run.Duplicates == 0 || len(run.Leaked) == 0 || run.Kills != 2 {
		t.Errorf("duplicates %d, leaked %d, kills %d; want duplicates and leaks after 2 kills", run.Duplicates, len(run.Leaked), run.Kills)
	}
	if want := "finale check -f operator.yaml --seed 3 --only kill-during-creates --runs 1 --quick --kill-window 3s"; run.Reproduce != want {
		t.Errorf("Reproduce = %q, want %q", run.Reproduce, want)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func metav1Duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// An operator that never makes its resources in the first, undisturbed run
// breaks that run's ready invariant, reported with what the dependents say
// and the operator's log; the experiments after it are skipped, not run
// for every one to wait its ready timeout for nothing. The wait calls
// the probe at the probe's interval, as the sampling does: a probe is often
// a command calling a rate-limited API (the wait called it every 50ms).
func TestNeverReady(t *testing.T) {
	// Two lanes: the second lane's experiment starts beside the first run
	// and is cancelled, or dropped if it ended, when that run says the
	// operator is never ready.
	for _, lanes := range []int{1, 2} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) { testNeverReady(t, lanes) })
	}
}

func testNeverReady(t *testing.T, lanes int) {
	svc, err := service.Start("", service.Options{Token: toyToken, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	var calls atomic.Int64
	spec := &check.Spec{
		Operator: check.Operator{Start: func(ctx context.Context, _ check.OperatorEnv) error { <-ctx.Done(); return nil }},
		CRDs:     []string{"../examples/keys/config/crd/keys.finale.dev_apikeys.yaml", "../examples/keys/config/crd/keys.finale.dev_keyservers.yaml"},
		Faults:   []check.FaultPoint{{Name: "keys", Address: svc.Addr()}},
		Parent: check.Parent{
			Secret: "{apiVersion: v1, kind: Secret, metadata: {name: token}}",
			Object: `{apiVersion: keys.finale.dev/v1alpha1, kind: KeyServer, metadata: {name: keys}, spec: {url: "http://{{.Proxy "keys"}}", tokenSecretRef: {name: token}}}`,
		},
		Dependents: check.Dependents{Count: 1, Template: "{apiVersion: keys.finale.dev/v1alpha1, kind: APIKey, metadata: {name: k}, spec: {name: k, keyServerRef: {name: keys}}}"},
		Probe: check.Probe{Interval: metav1Duration(time.Second), Func: func(context.Context, check.Values) ([]string, error) {
			calls.Add(1)
			return nil, nil
		}},
		Timeouts: check.Timeouts{Ready: metav1Duration(3 * time.Second), Finish: metav1Duration(20 * time.Second)},
	}
	t0 := time.Now()
	rep, err := check.Run(t.Context(), spec, check.Options{Quick: true, Only: []string{check.OrderAllAtOnce, check.OrderSecretFirst}, WorkDir: t.TempDir(), Lanes: lanes})
	elapsed := time.Since(t0)
	if err != nil {
		t.Fatalf("Run = %v, want a report", err)
	}
	type verdict struct {
		Name    string
		Verdict check.Verdict
		Runs    int
	}
	var got []verdict
	for _, e := range rep.Experiments {
		got = append(got, verdict{e.Name, e.Verdict, len(e.Runs)})
	}
	want := []verdict{{check.OrderAllAtOnce, check.Broke, 1}, {check.OrderSecretFirst, check.Skipped, 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("experiments (-want +got):\n%s", diff)
	}
	if vs := rep.Experiments[0].Runs[0].Violations; len(vs) == 0 || vs[0].Invariant != check.Ready || !strings.Contains(vs[0].Detail, "the probe lists 0 of 1 external resources; APIKey k: no conditions") {
		t.Errorf("violations %v, want ready naming the count and the APIKey's conditions", vs)
	}
	// The sampling, once a second while the run lasts, the ready wait,
	// once a second for its 3s, and the first and last listings: a tick
	// more at each end of the two loops, on each lane. Calls at 50ms in
	// the wait made 74 in a 15s run.
	if n, most := calls.Load(), int64(lanes)*(int64(elapsed/time.Second)+3+4); n > most {
		t.Errorf("the probe was called %d times in a %s run with a 1s interval; want at most %d", n, elapsed.Round(time.Second), most)
	}
}

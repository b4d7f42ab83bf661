// Package tcheck_test runs finale check's seed experiment for G1 against
// the Temporal example (examples/temporal), both builds, in-process
// through check's Go API: the operator's established HTTP/2 connections to
// a real Temporal server stalled (PINGs answered, nothing else), then its
// WorkerDeployments deleted. The guarded build evicts the stalled client
// and finishes; the naive build (temporal-worker-controller v1.7's pool)
// never does, and the server-side deployments stay.
package tcheck_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/examples/temporal/controller"
	"github.com/finale-dev/finale/examples/temporal/stack"
	"github.com/finale-dev/finale/internal/testenv"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // the report says what happened
	testenv.Main(m)
}

const dependents = 2

// spec describes the example to check: the Connection and its API-key
// Secret, WorkerDeployments for server-side deployments named after the
// run's namespace, the operator in-process, and a probe that describes
// those deployments through a client of its own, straight to the server.
func spec(t *testing.T, naive bool) *check.Spec {
	ts := testenv.Temporal(t)
	harness, err := sdkclient.DialContext(t.Context(), sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Identity: "finale-check-probe"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(harness.Close)
	return &check.Spec{
		Name: map[bool]string{false: "temporal-example", true: "temporal-example-naive"}[naive],
		Operator: check.Operator{Grace: metav1.Duration{Duration: 10 * time.Second},
			Start: func(ctx context.Context, e check.OperatorEnv) error {
				mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
					Scheme: stack.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
					Controller: config.Controller{SkipNameValidation: ptr.To(true)},
				})
				if err != nil {
					return err
				}
				if _, err := controller.Setup(mgr, controller.Options{
					Naive: naive, CallTimeout: stack.DefaultCallTimeout, RetryInterval: stack.DefaultRetryInterval,
					RateLimiter: stack.RetrySpacing(), SkipNameValidation: true,
					PoolName: fmt.Sprintf("check-%v-%d", naive, time.Now().UnixNano()),
				}); err != nil {
					return err
				}
				return mgr.Start(ctx)
			}},
		CRDs:   []string{"../config/crd/temporal.finale.dev_connections.yaml", "../config/crd/temporal.finale.dev_workerdeployments.yaml"},
		Faults: []check.FaultPoint{{Name: "temporal", Address: ts.HostPort, Protocol: check.ProtocolHTTP2}},
		Parent: check.Parent{
			Secret: `{apiVersion: v1, kind: Secret, metadata: {name: temporal-key}, stringData: {api-key: ` + stack.APIKey + `}}`,
			Object: `{apiVersion: temporal.finale.dev/v1alpha1, kind: Connection, metadata: {name: temporal},
			  spec: {hostPort: "{{.Proxy "temporal"}}", plaintext: true, apiKeySecretRef: {name: temporal-key}}}`,
		},
		Dependents: check.Dependents{Count: dependents, ReadyCondition: "Ready",
			Template: `{apiVersion: temporal.finale.dev/v1alpha1, kind: WorkerDeployment, metadata: {name: wd-{{.Index}}},
			  spec: {connectionRef: {name: temporal}, temporalNamespace: ` + ts.Namespace + `, deploymentName: "{{.Namespace}}-wd-{{.Index}}"}}`,
		},
		Probe: check.Probe{Func: func(ctx context.Context, v check.Values) ([]string, error) {
			var out []string
			for i := range dependents {
				name := fmt.Sprintf("%s-wd-%d", v.Namespace, i)
				_, err := harness.WorkerDeploymentClient().GetHandle(name).Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
				var nf *serviceerror.NotFound
				switch {
				case err == nil:
					out = append(out, "deployment "+name)
				case !errors.As(err, &nf):
					return nil, err
				}
			}
			return out, nil
		}},
		Timeouts: check.Timeouts{Finish: metav1.Duration{Duration: 45 * time.Second}},
	}
}

// G1 through finale check: the stall holds with the guarded build and
// breaks the naive one (the deletion never finishes, the deployments
// stay), on a real Temporal server and SDK.
func TestStallThroughCheck(t *testing.T) {
	for _, naive := range []bool{false, true} {
		t.Run(map[bool]string{false: "guarded", true: "naive"}[naive], func(t *testing.T) {
			rep, err := check.Run(t.Context(), spec(t, naive), check.Options{Quick: true, Seed: 1, Only: []string{check.TransportStall}, Progress: testLog{t}, WorkDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]check.Verdict{check.TransportStall: check.Held}
			if naive {
				want[check.TransportStall] = check.Broke
			}
			if diff := cmp.Diff(want, rep.Verdicts()); diff != "" {
				var b strings.Builder
				_ = rep.WriteText(&b)
				t.Errorf("verdicts (-want +got):\n%s\n%s", diff, b.String())
			}
			if naive {
				var got []check.Invariant
				for _, v := range rep.Experiments[0].Runs[0].Violations {
					got = append(got, v.Invariant)
				}
				if diff := cmp.Diff([]check.Invariant{check.Finished, check.NoLeak}, got); diff != "" {
					t.Errorf("the naive build's violations (-want +got):\n%s", diff)
				}
			}
		})
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

package controller_test

import (
	"context"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/lifecycle"
)

// A Server that cannot be used returns its failure to the workqueue, so
// that its retries back off (ServerRateLimiter) and are counted as
// reconcile errors, instead of a fixed two-second requeue that
// controller-runtime neither spaces nor counts.
func TestUnusableServerBacksOff(t *testing.T) {
	w := start(t, controller.Options{})
	before := serverReconcileErrors(t)
	ns := w.serverAt("127.0.0.1", closedPort(t))
	srv := &v1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}}
	w.waitCondition(srv, lifecycle.ConditionReady, metav1.ConditionFalse, controller.ReasonConnectFailed)
	err := controlplane.WaitFor(t.Context(), wait, "a Server reconcile error counted", func(context.Context) (bool, error) {
		return serverReconcileErrors(t) > before, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// serverReconcileErrors reads controller-runtime's error counter of the
// Server controller.
func serverReconcileErrors(t *testing.T) float64 {
	t.Helper()
	return counter(t, "controller_runtime_reconcile_errors_total", "controller", controller.ControllerServer)
}

// counter sums the named counter's series whose label has value (every
// series when label is ""), from the registry the in-process operators
// share.
func counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

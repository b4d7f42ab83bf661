// Command operator runs the reference PostgreSQL operator (Server, Role,
// Database) against any cluster: --kubeconfig, or the in-cluster config.
// Cleanup records and the election Lease go to $POD_NAMESPACE (or
// --records-namespace). Its flags and wiring are in package app.
//
// Metrics are served as kubebuilder's scaffold serves them: over HTTPS
// (a self-signed certificate unless --metrics-cert-path names one), and
// only to clients whose bearer token the API server authenticates
// (TokenReview) and authorizes for GET /metrics (SubjectAccessReview):
// config/rbac's finale-postgres-metrics-reader ClusterRole is what a
// Prometheus scraper is bound to.
//
// With --leader-elect, several replicas elect a leader through a Lease, and
// the leader's PostgreSQL calls are fenced by it (package fence): none
// starts, and none runs on, once another replica may lead. The election's
// timing is controller-runtime's default (lease 15s, renew deadline 10s,
// retry period 2s: --leader-elect-lease-duration, -renew-deadline,
// -retry-period); the fence ends a fifth of the lease duration before the
// lease can pass (--leader-elect-fence-margin). A leader that cannot renew
// exits after the renew deadline; a standby takes over once the lease
// duration has passed since the last renewal it saw.
package main

import (
	"errors"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/examples/postgres/cmd/operator/app"
)

func main() {
	if err := app.Main(ctrl.SetupSignalHandler(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		if errors.Is(err, app.ErrFlags) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

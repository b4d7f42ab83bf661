package sweep_test

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// Wiring the sweeper into an operator's manager: records from the
// operator's ledger, owners from the cache and confirmed live, and for each
// kind the connections its records may be swept through (a
// lifecycle.Reconciler's SweepTargets).
func Example() {
	wire := func(mgr ctrl.Manager, l *ledger.Ledger, roles, databases sweep.Targets) error {
		s, err := sweep.New(sweep.Options{
			Ledger:  l,
			Owners:  mgr.GetCache(),
			Live:    mgr.GetAPIReader(),
			Targets: sweep.ByKind{"Role": roles, "Database": databases},
			// Recorder: mgr.GetEventRecorder("finale-sweep") with
			// controller-runtime v0.23 or later; nil sends no Events.
		})
		if err != nil {
			return err
		}
		return mgr.Add(s) // runs on the leader only
	}
	_ = wire
}

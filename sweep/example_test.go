package sweep_test

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/sweep"
)

// Wiring the sweeper into an operator's manager: records from the ledger
// store, owners from the cache, candidate connections from the operator.
func Example() {
	wire := func(mgr ctrl.Manager, connections func(context.Context) ([]ledger.Target, error)) error {
		store, err := ledger.NewConfigMapStore(ledger.ReadWriter{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()}, "") // $POD_NAMESPACE
		if err != nil {
			return err
		}
		s, err := sweep.New(sweep.Options{
			Store:    store,
			Owners:   mgr.GetCache(),
			Targets:  sweep.TargetsFn(connections),
			Recorder: mgr.GetEventRecorder("finale-sweep"),
		})
		if err != nil {
			return err
		}
		return mgr.Add(s) // runs on the leader only
	}
	_ = wire
}

package scenarios_test

import (
	"context"
	"fmt"
	"os"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/scenarios"
)

// The scenarios a command can run by name: each seed, its naive
// counterpart, and the crash-after-every-write campaigns.
func ExampleNames() {
	for _, n := range scenarios.Names() {
		fmt.Println(n)
	}
	// Output:
	// argo-status-capture
	// argo-status-capture-naive
	// crash-database
	// crash-role
	// failover
	// failover-naive
	// lagging-owner
	// lagging-owner-naive
	// namespace-deletion
	// namespace-deletion-naive
	// poisoned-client
	// poisoned-client-naive
	// temporal-poisoned-client
	// temporal-poisoned-client-naive
}

// Running a seed scenario and a randomized campaign on a fresh control plane
// and PostgreSQL, as `finale-lab scenario` does.
func ExampleCampaign() {
	ctx := context.Background()
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cp.Stop()
	pg, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pg.Stop()
	env := scenarios.Env{ControlPlane: cp, Postgres: pg}

	r, err := scenarios.Run(ctx, scenarios.NamespaceDeletion, env, os.Stdout)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = r.Table(os.Stdout)

	rep, err := scenarios.Campaign(ctx, scenarios.CampaignOptions{Seed: 42, Runs: 20}, env, os.Stdout)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = rep.Table(os.Stdout) // a failing run prints its seed and schedule
}

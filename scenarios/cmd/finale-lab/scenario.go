package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/scenarios"
)

// errInvariants is returned when a scenario's invariants did not come out as
// its variant expects: held for guarded runs, broken for -naive ones.
// It exits 2, a violation, as finale check's broken experiment does.
var errInvariants = exitcode.With(exitcode.Violation, errors.New("invariants did not come out as expected"))

// scenario runs `finale-lab scenario NAME` or `finale-lab scenario campaign`.
func scenario(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("scenario", flag.ContinueOnError)
	seed := fs.Int64("seed", 1, "campaign: the first run's seed; run i uses seed+i, so --seed S --runs 1 replays run S")
	runs := fs.Int("runs", 20, "campaign: how many randomized runs")
	naive := fs.Bool("naive", false, "campaign: run against the build with the guarantees off (violations expected)")
	workers := fs.Int("workers", 0, "campaign: runs in parallel (0 is the package default)")
	apiservers := fs.Bool("apiservers", false, "campaign: add a second kube-apiserver per world and its faults (stale-apiserver-lag, apiserver-partition, apiserver-failover)")
	election := fs.String("election", electionFast, "failover: the replicas' election timing, "+electionFast+" ("+scenarios.FastElection.String()+" lease/renew/retry) or "+electionOperator+" (the operator's defaults, "+scenarios.OperatorElection.String()+")")
	if len(args) == 0 {
		return exitcode.Usagef("name a scenario: %s, or campaign", strings.Join(scenarios.Names(), ", "))
	}
	name := args[0]
	if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return exitcode.With(exitcode.Usage, fmt.Errorf("scenario: %w", err))
	}
	if fs.NArg() > 0 {
		return exitcode.Usagef("scenario: unexpected arguments %q: finale-lab scenario takes one NAME, then flags", fs.Args())
	}
	el, ok := elections[*election]
	if !ok {
		return exitcode.Usagef("unknown --election %q: choose %s or %s", *election, electionFast, electionOperator)
	}
	if name != "campaign" && !slices.Contains(scenarios.Names(), name) {
		return exitcode.Usagef("unknown scenario %q: choose one of %s, or campaign", name, strings.Join(scenarios.Names(), ", "))
	}

	// The runs narrate what matters; the operator's own log (errors made on
	// purpose by the faults) would bury it.
	ctrllog.SetLogger(logr.Discard())
	fmt.Fprintln(out, "-- starting the control plane and PostgreSQL")
	cp, err := controlplane.Start(ctx, controlplane.Options{Log: out})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	pg, err := pgserver.Start(ctx, pgserver.Options{Log: out})
	if err != nil {
		return err
	}
	defer func() { _ = pg.Stop() }()
	env := scenarios.Env{ControlPlane: cp, Postgres: pg}

	if name == scenarios.Failover || name == scenarios.FailoverNaive {
		return failover(ctx, fs, scenarios.FailoverOptions{Seed: *seed, Runs: *runs, Naive: name == scenarios.FailoverNaive, Election: el}, env, out)
	}
	if name == "campaign" {
		rep, err := scenarios.Campaign(ctx, scenarios.CampaignOptions{Seed: *seed, Runs: *runs, Naive: *naive, Workers: *workers, APIServers: *apiservers}, env, out)
		if err != nil {
			return err
		}
		if err := rep.Table(out); err != nil {
			return err
		}
		if !rep.OK() {
			return errInvariants
		}
		return nil
	}
	res, err := scenarios.Run(ctx, name, env, out)
	if err != nil {
		return err
	}
	if err := res.Table(out); err != nil {
		return err
	}
	if !res.OK() {
		return errInvariants
	}
	return nil
}

// The presets of --election.
const (
	electionFast     = "fast"
	electionOperator = "operator"
)

var elections = map[string]scenarios.Election{electionFast: scenarios.FastElection, electionOperator: scenarios.OperatorElection}

// failover runs `finale-lab scenario failover [--seed N] [--runs K]
// [--election fast|operator]`: K runs (one unless --runs is given) of the
// leader-failover scenario, seeded.
func failover(ctx context.Context, fs *flag.FlagSet, o scenarios.FailoverOptions, env scenarios.Env, out io.Writer) error {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "runs" })
	if !set {
		o.Runs = 1
	}
	rep, err := scenarios.FailoverCampaign(ctx, o, env, out)
	if terr := rep.Table(out); terr != nil && err == nil {
		err = terr
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return errInvariants
	}
	return nil
}

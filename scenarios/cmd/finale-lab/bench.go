package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/scenarios"
	"github.com/finale-dev/finale/scenarios/bench"
)

// The benchmark's target sizes: 1,000 Roles, and with -all 100,000 records
// for the sweeper's pass.
const (
	defaultBenchRoles   = 1000
	defaultSweepRecords = 100_000
)

// benchCmd measures the reference operator with its guarantees on against
// the naive build of it, on a fresh local stack, and prints a table. A
// missed performance target is reported in the table, not as a failure: on
// shared cores a single run is noisy. A broken guarantee (a role left in
// PostgreSQL) is an error.
func benchCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(out)
	roles := fs.Int("roles", defaultBenchRoles, "Roles per run (each build runs twice, then one namespace of this many is deleted)")
	scale := fs.Bool("scale", false, "instead, run each build once at -namespaces × -roles-per-namespace Roles, the operator as a process of its own")
	all := fs.Bool("all", false, "run every measurement (the sweeper's pass over -records records, the -roles runs, the -scale run), each on a fresh stack, and print one table")
	namespaces := fs.Int("namespaces", defaultScaleNamespaces, "with -scale or -all: namespaces, each with a Server")
	perNS := fs.Int("roles-per-namespace", defaultScalePerNS, "with -scale or -all: Roles in each namespace")
	records := fs.Int("records", defaultSweepRecords, "with -all: records (and owners) the sweeper's pass goes over")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return exitcode.With(exitcode.Usage, fmt.Errorf("bench: %w", err))
	}
	switch {
	case fs.NArg() > 0:
		return exitcode.Usagef("bench: unexpected argument %q: finale-lab bench takes only flags (-roles N)", fs.Arg(0))
	case *roles <= 0:
		return exitcode.Usagef("bench: -roles %d: give a positive number of Roles", *roles)
	case *namespaces <= 0 || *perNS <= 0:
		return exitcode.Usagef("bench: -namespaces %d -roles-per-namespace %d: give positive numbers", *namespaces, *perNS)
	case *records <= 0:
		return exitcode.Usagef("bench: -records %d: give a positive number of records", *records)
	case *all && *scale:
		return exitcode.Usagef("bench: -all already runs the -scale run; give one of them")
	}
	// The operator's log would only add I/O to what is measured, equally
	// for both builds; the table is the output.
	ctrllog.SetLogger(logr.Discard())
	// Each part's rows, printed in this order: the lifecycle runs, the run
	// at scale, the sweep.
	var lc, sc, sw []bench.Row
	if *all {
		// The sweep first, while this process's memory holds nothing of
		// another run: its peak RSS is the pass's.
		r, err := benchSweep(ctx, out, *records)
		if err != nil {
			return err
		}
		sw = bench.SweepRows(r)
	}
	if !*scale {
		l, nd, err := benchLifecycle(ctx, out, *roles)
		if err != nil {
			return err
		}
		lc = bench.LifecycleRows(l, nd)
	}
	if *scale || *all {
		s, err := benchScale(ctx, out, *namespaces, *perNS)
		if err != nil {
			return err
		}
		sc = bench.ScaleRows(s)
	}
	fmt.Fprintln(out)
	return bench.WriteTable(out, lc, sc, sw)
}

// benchLifecycle runs every build over roles Roles, then a namespace of
// roles Roles deleted, each run on a control plane and a PostgreSQL of its
// own.
func benchLifecycle(ctx context.Context, out io.Writer, roles int) (bench.Lifecycle, bench.NamespaceDeletion, error) {
	opts, err := controlPlaneOptions(out)
	if err != nil {
		return bench.Lifecycle{}, bench.NamespaceDeletion{}, err
	}
	s := bench.Stack{Log: out,
		NewControlPlane: func(ctx context.Context) (*controlplane.ControlPlane, error) {
			return controlplane.Start(ctx, opts)
		},
		NewPostgres: func(ctx context.Context) (*pgserver.Server, error) {
			return pgserver.Start(ctx, pgserver.Options{Log: out})
		},
		Operator: scenarios.OperatorCommand,
	}
	l, err := bench.RunLifecycle(ctx, s, roles)
	if err != nil {
		return l, bench.NamespaceDeletion{}, err
	}
	nd, err := bench.RunNamespaceDeletion(ctx, s, roles)
	return l, nd, err
}

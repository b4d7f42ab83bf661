package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/scenarios/bench"
)

// defaultBenchRoles is the benchmark's target size: 1,000 Roles.
const defaultBenchRoles = 1000

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
	namespaces := fs.Int("namespaces", defaultScaleNamespaces, "with -scale: namespaces, each with a Server")
	perNS := fs.Int("roles-per-namespace", defaultScalePerNS, "with -scale: Roles in each namespace")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return exitcode.With(exitcode.Usage, fmt.Errorf("bench: %w", err))
	}
	if fs.NArg() > 0 {
		return exitcode.Usagef("bench: unexpected argument %q: finale-lab bench takes only flags (-roles N)", fs.Arg(0))
	}
	if *roles <= 0 {
		return exitcode.Usagef("bench: -roles %d: give a positive number of Roles", *roles)
	}
	// The operator's log would only add I/O to what is measured, equally
	// for both builds; the table is the output.
	ctrllog.SetLogger(logr.Discard())
	if *scale {
		return benchScale(ctx, out, *namespaces, *perNS)
	}
	st, err := startStack(ctx, out)
	if err != nil {
		return err
	}
	defer st.stop()
	s := bench.Stack{Config: st.cp.Config, ControlPlane: st.cp, Postgres: st.pg, Log: out}
	l, err := bench.RunLifecycle(ctx, s, *roles)
	if err != nil {
		return err
	}
	nd, err := bench.RunNamespaceDeletion(ctx, s, *roles)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	return bench.WriteTable(out, l, nd)
}

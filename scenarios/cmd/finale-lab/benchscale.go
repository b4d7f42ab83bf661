package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/scenarios"
	"github.com/finale-dev/finale/scenarios/bench"
)

// The scale run's default size: 10,000 Roles across 100 namespaces.
const (
	defaultScaleNamespaces = 100
	defaultScalePerNS      = 100
)

// benchScale runs each build once at namespaces × perNS Roles, the operator
// as a child process (this binary, as the reference operator's command),
// and prints the table.
func benchScale(ctx context.Context, out io.Writer, namespaces, perNS int) error {
	if namespaces <= 0 || perNS <= 0 {
		return exitcode.Usagef("bench: -scale with -namespaces %d -roles-per-namespace %d: give positive numbers", namespaces, perNS)
	}
	dir, err := os.MkdirTemp("", "finale-bench-scale-")
	if err != nil {
		return err
	}
	st, err := startStack(ctx, out)
	if err != nil {
		return err
	}
	defer st.stop()
	s := bench.Stack{Config: st.cp.Config, ControlPlane: st.cp, Postgres: st.pg, Log: out}
	fmt.Fprintf(out, "-- the operator's logs: %s (kept if the run fails)\n", dir)
	res, err := bench.RunScale(ctx, s, bench.ScaleOptions{Namespaces: namespaces, PerNamespace: perNS, Operator: scenarios.OperatorCommand, Dir: dir})
	if err != nil {
		return err
	}
	_ = os.RemoveAll(dir) // the table is the output; the logs only explain a failure
	fmt.Fprintln(out)
	return bench.WriteScaleTable(out, res)
}

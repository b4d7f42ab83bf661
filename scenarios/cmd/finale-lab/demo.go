package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/config/crd"
	"github.com/finale-dev/finale/internal/procstat"
	"github.com/finale-dev/finale/pgserver"
)

// demo starts the real stack and reports what it took. Every step prints
// before it starts: a cold first run builds Kubernetes for minutes.
func demo(ctx context.Context, out io.Writer, keep bool) error {
	fmt.Fprintln(out, "== finale-lab demo: a real control plane (etcd, kube-apiserver, kube-controller-manager) and a real PostgreSQL, on 127.0.0.1")

	st, err := startStack(ctx, out)
	if err != nil {
		return err
	}
	defer st.stop()
	cp, pg, cpReady, pgReady := st.cp, st.pg, st.cpReady, st.pgReady

	v, err := cp.ServerVersion()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "kubeconfig:   %s\n", cp.Kubeconfig)
	fmt.Fprintf(out, "kubectl:      %s --kubeconfig %s get ns\n", filepath.Join(cp.BinDir, "kubectl"), cp.Kubeconfig)
	fmt.Fprintf(out, "PostgreSQL:   %s (admin DSN has a generated password; see pgserver)\n", pg.Addr())
	fmt.Fprintf(out, "versions:     Kubernetes %s, PostgreSQL %s\n", v.GitVersion, pg.Version)
	fmt.Fprintf(out, "ready after:  control plane %s, PostgreSQL %s\n\n", cpReady.Round(time.Millisecond), pgReady.Round(time.Millisecond))

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "process\tpid\tstart to ready\tRSS")
	pids := cp.PIDs()
	names := make([]string, 0, len(pids))
	for n := range pids {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", n, pids[n], cp.Started[n].Round(time.Millisecond), rss(pids[n]))
	}
	fmt.Fprintf(tw, "postgres\t%d\t%s\t%s\n", pg.PID(), pgReady.Round(time.Millisecond), rss(pg.PID()))
	if err := tw.Flush(); err != nil {
		return err
	}

	if err := runStory(ctx, out, cp, pg, st.ca); err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(out, "\nrunning; press Ctrl-C to stop and clean up")
		<-ctx.Done()
	}
	return nil
}

func rss(pid int) string {
	b, err := procstat.RSS(pid)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return "?"
	}
	return procstat.MiB(b)
}

// stack is the real local stack the demo and the benchmarks run on.
type stack struct {
	cp               *controlplane.ControlPlane
	pg               *pgserver.Server
	ca               []byte // PEM of the CA that issued pg's certificate
	cpReady, pgReady time.Duration
	out              io.Writer
}

// startStack starts a control plane and a PostgreSQL, saying so first: a
// cold first run builds Kubernetes for minutes.
func startStack(ctx context.Context, out io.Writer) (*stack, error) {
	st := &stack{out: out}
	fmt.Fprintln(out, "-- starting the control plane")
	t0 := time.Now()
	opts, err := controlPlaneOptions(out)
	if err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	st.cp, st.cpReady = cp, time.Since(t0)
	fmt.Fprintln(out, "-- starting PostgreSQL (TLS: a CA of the run's own, a certificate for 127.0.0.1 and localhost)")
	t0 = time.Now()
	// PostgreSQL serves TLS so that the demo's Server runs at its default,
	// verify-full: the one setting the sweeper acts through.
	ca, err := pgserver.NewCA()
	if err != nil {
		st.stop()
		return nil, err
	}
	cert, err := ca.Issue("127.0.0.1", "localhost")
	if err != nil {
		st.stop()
		return nil, err
	}
	st.ca = ca.CertPEM
	if st.pg, err = pgserver.Start(ctx, pgserver.Options{Log: out, TLS: &cert}); err != nil {
		st.stop()
		return nil, err
	}
	st.pgReady = time.Since(t0)
	return st, nil
}

// controlPlaneOptions starts a control plane with the reference operator's
// CRDs installed before its controller manager, so that the garbage
// collector watches Roles from the start, as in a cluster that has run the
// operator for a while: a benchmark run otherwise pays, or escapes, the
// collector's start on them, depending on when it runs.
func controlPlaneOptions(out io.Writer) (controlplane.Options, error) {
	crds, err := crd.CRDs()
	if err != nil {
		return controlplane.Options{}, err
	}
	return controlplane.Options{Log: out, CRDs: crds}, nil
}

func (st *stack) stop() {
	if st.pg != nil {
		fmt.Fprintln(st.out, "-- stopping PostgreSQL")
		if err := st.pg.Stop(); err != nil {
			fmt.Fprintln(st.out, err)
		}
	}
	fmt.Fprintln(st.out, "-- stopping the control plane")
	if err := st.cp.Stop(); err != nil {
		fmt.Fprintln(st.out, err)
	}
}

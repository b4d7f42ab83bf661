package main

import (
	"context"
	"fmt"
	"io"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/internal/sweepbench"
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
// on a stack of its own.
func benchScale(ctx context.Context, out io.Writer, namespaces, perNS int) (bench.Scale, error) {
	dir, err := os.MkdirTemp("", "finale-bench-scale-")
	if err != nil {
		return bench.Scale{}, err
	}
	st, err := startStack(ctx, out)
	if err != nil {
		return bench.Scale{}, err
	}
	defer st.stop()
	s := bench.Stack{Config: st.cp.Config, ControlPlane: st.cp, Postgres: st.pg, Log: out}
	fmt.Fprintf(out, "-- the operator's logs: %s (kept if the run fails)\n", dir)
	res, err := bench.RunScale(ctx, s, bench.ScaleOptions{Namespaces: namespaces, PerNamespace: perNS, Operator: scenarios.OperatorCommand, Dir: dir})
	if err != nil {
		return res, err
	}
	_ = os.RemoveAll(dir) // the table is the output; the logs only explain a failure
	return res, nil
}

// benchSweep measures the sweeper's pass over records records, on a stack
// of its own.
func benchSweep(ctx context.Context, out io.Writer, records int) (sweepbench.Result, error) {
	st, err := startStack(ctx, out)
	if err != nil {
		return sweepbench.Result{}, err
	}
	defer st.stop()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	c, err := client.New(st.cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		return sweepbench.Result{}, err
	}
	return sweepbench.Run(ctx, st.cp.Config, c, records, out)
}

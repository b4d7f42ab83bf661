// Command model runs the protocol model's exhaustive cases and prints a
// table (states, transitions, strongly connected components, depth, time)
// and every counterexample found: `make model` runs the full suite, -ci
// the one `make test` runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/internal/model"
)

func main() { os.Exit(run()) }

func run() int {
	ci := flag.Bool("ci", false, "only the CI-sized cases (what make test checks)")
	only := flag.String("only", "", "only the cases whose name contains this")
	maxStates := flag.Int("max-states", 20_000_000, "stop a case at this many states")
	progress := flag.Bool("progress", false, "report progress every million states")
	flag.Parse()
	// hold logs what it events; the tables run it thousands of times.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var cases []model.Case
	for _, c := range model.Suite(!*ci) {
		if strings.Contains(c.Name, *only) {
			cases = append(cases, c)
		}
	}
	fmt.Printf("== finale's deletion protocol, model-checked: %d cases\n", len(cases))
	t0 := time.Now()
	var outs []model.Outcome
	failed := 0
	for _, c := range cases {
		var p io.Writer
		if *progress {
			p = os.Stderr
		}
		o := model.Check(ctx, c, *maxStates, p)
		if !o.OK() {
			failed++
		}
		outs = append(outs, o)
		if ctx.Err() != nil {
			break
		}
	}
	model.Report(os.Stdout, outs)
	states := 0
	for _, o := range outs {
		states += o.Result.States
	}
	fmt.Printf("\n== %d cases, %d states in all, %s; %d not as expected\n", len(outs), states, time.Since(t0).Round(time.Millisecond), failed)
	if failed > 0 || ctx.Err() != nil {
		return 1
	}
	return 0
}

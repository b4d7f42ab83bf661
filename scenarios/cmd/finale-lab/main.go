// Command finale-lab runs finale's demo, benchmarks and fault scenarios on
// a local control plane and PostgreSQL, with the reference operator of
// examples/postgres (and the seeds' own Temporal and Argo stacks). It lives
// in the scenarios module, beside what it runs, so that the library module
// requires none of it; `finale audit` and `finale check` are in cmd/finale.
//
//	finale-lab demo [-keep]                          start the stack, show the guarantees, stop
//	finale-lab bench [-roles N]                      the guarantees' cost against the naive build, as a table
//	finale-lab bench -scale [-namespaces N -roles-per-namespace M]
//	                                                 the same at 10,000 Roles in 100 namespaces, each build once
//	finale-lab bench -all [-records N]               both, and the sweeper's pass over 100,000 records, in one table
//	finale-lab scenario NAME                         one seed scenario (or its -naive counterpart)
//	finale-lab scenario campaign --seed N --runs K   randomized fault schedules, reproducible by seed
//	finale-lab scenario failover [--seed N --runs K] [--election fast|operator]
//	                                                 two operator replicas; the leader killed and paused
//
// Exit status (internal/exitcode, the same table as finale's): 0 success,
// 1 could not run, 2 a scenario's invariants did not come out as its
// variant expects, 64 a usage error (unknown command, scenario or flag).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/scenarios"
)

const usage = `usage: finale-lab COMMAND [flags]

commands:
  demo [-keep]                          start a local control plane and PostgreSQL and show finale at work
  bench [-roles N]                      measure the guarantees against the naive build (default 1000 Roles); prints a table
  bench -scale [-namespaces N -roles-per-namespace M]
                                        the same at scale (default 100 × 100 Roles), the operator as a process of its own
  bench -all [-records N]               both, and the sweeper's pass over N records (default 100,000), in one table
  scenario NAME                         run a seed scenario; NAME-naive runs it with the guarantee off
  scenario campaign --seed N --runs K   randomized fault schedules; a failing run prints its seed
                     [--apiservers]      with a second kube-apiserver's faults (lag, partition, failover)
  scenario failover [--seed N --runs K] two operator replicas as processes; the leader killed during creates,
                                        a namespace deletion and a sweep, then paused and woken; prints takeover times
                     [--election fast|operator]  the replicas' election timing: 3s/2s/500ms, or the operator's 15s/10s/2s
`

func main() {
	// The failover scenario runs its operator replicas as copies of this
	// binary: in one of them, this runs the operator and exits.
	scenarios.ReplicaMain()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "finale-lab:", err)
		os.Exit(exitcode.Of(err))
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitcode.Usagef("no command given")
	}
	switch args[0] {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		keep := fs.Bool("keep", false, "keep the stack running until Ctrl-C, to explore it with kubectl and psql")
		if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
			return nil
		} else if err != nil {
			return exitcode.With(exitcode.Usage, fmt.Errorf("demo: %w", err))
		}
		if fs.NArg() > 0 {
			return exitcode.Usagef("demo: unexpected arguments %q: finale-lab demo takes only flags", fs.Args())
		}
		return demo(ctx, out, *keep)
	case "bench":
		return benchCmd(ctx, args[1:], out)
	case "scenario":
		return scenario(ctx, args[1:], out)
	case "help", "-h", "--help":
		fmt.Fprint(out, usage)
		return nil
	default:
		fmt.Fprint(os.Stderr, usage)
		return exitcode.Usagef("unknown command %q", args[0])
	}
}

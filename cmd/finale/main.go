// Command finale runs finale's demo and its fault scenarios on a local
// control plane and PostgreSQL.
//
//	finale demo [-keep]                          start the stack, show the guarantees, stop
//	finale bench [-roles N]                      the guarantees' cost against the naive build, as a table
//	finale audit [flags]                         stuck deletions and cleanup records of a live cluster
//	finale scenario NAME                         one seed scenario (or its -naive counterpart)
//	finale scenario campaign --seed N --runs K   randomized fault schedules, reproducible by seed
//	finale scenario failover [--seed N --runs K] [--election fast|operator]
//	                                             two operator replicas; the leader killed and paused
//
// Exit status: 0 success, 1 error; audit exits 2 when it found problems and 3
// when it found only pending records (owner gone, within the settle window).
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

	"github.com/finale-dev/finale/scenarios"
)

const usage = `usage: finale COMMAND [flags]

commands:
  demo [-keep]                          start a local control plane and PostgreSQL and show finale at work
  bench [-roles N]                      measure the guarantees against the naive build (default 1000 Roles); prints a table
  audit [--kubeconfig PATH] [--records-namespace NS] [--settle 5m] [-o text|json]
                                        stuck deletions, cleanup records, unreachable records of a live cluster;
                                        read-only; exits 2 on findings, 3 on pending records only
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
		fmt.Fprintln(os.Stderr, "finale:", err)
		os.Exit(exitCode(err))
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		keep := fs.Bool("keep", false, "keep the stack running until Ctrl-C, to explore it with kubectl and psql")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return demo(ctx, out, *keep)
	case "bench":
		return benchCmd(ctx, args[1:], out)
	case "audit":
		return audit(ctx, args[1:], out)
	case "scenario":
		return scenario(ctx, args[1:], out)
	case "help", "-h", "--help":
		fmt.Fprint(out, usage)
		return nil
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// Command finale tests and audits the deletion behaviour of Kubernetes
// operators:
//
//	finale audit [flags]    stuck deletions and cleanup records of a live cluster
//	finale check -f FILE    the deletion test of any operator (package check)
//
// It needs nothing but the library module: `go run
// github.com/finale-dev/finale/cmd/finale@VERSION` works from any module.
// finale's own demo, benchmarks and fault scenarios run the reference
// operator, which lives in a module of its own: see scenarios/cmd/finale-lab.
//
// Exit status: 0 success, 1 error; audit exits 2 when it found problems and 3
// when it found only pending records (owner gone, within the settle window);
// check exits 2 when an experiment broke.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: finale COMMAND [flags]

commands:
  audit [--kubeconfig PATH] [--records-namespace NS] [--settle 5m] [-o text|json]
                                        stuck deletions, cleanup records, unreachable records of a live cluster;
                                        read-only; exits 2 on findings, 3 on pending records only
  check -f operator.yaml [--quick] [--seed N] [-o text|json] [--report out.md|out.html] [--only EXPERIMENT]
                                        the deletion test of any operator, on a local control plane of its own;
                                        exits 2 when an experiment broke
`

func main() {
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
	case "audit":
		return audit(ctx, args[1:], out)
	case "check":
		return runCheck(ctx, args[1:], out)
	case "help", "-h", "--help":
		fmt.Fprint(out, usage)
		return nil
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// Command finale runs finale's demo and its fault scenarios on a local
// control plane and PostgreSQL.
//
//	finale demo [-keep]                          start the stack, show the guarantees, stop
//	finale scenario NAME                         one seed scenario (or its -naive counterpart)
//	finale scenario campaign --seed N --runs K   randomized fault schedules, reproducible by seed
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
)

const usage = `usage: finale COMMAND [flags]

commands:
  demo [-keep]                          start a local control plane and PostgreSQL and show finale at work
  scenario NAME                         run a seed scenario; NAME-naive runs it with the guarantee off
  scenario campaign --seed N --runs K   randomized fault schedules; a failing run prints its seed
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "finale:", err)
		os.Exit(1)
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

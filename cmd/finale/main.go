// Command finale tests and audits the deletion behaviour of Kubernetes
// operators:
//
//	finale audit [flags]       stuck deletions and cleanup records of a live cluster
//	finale approve --namespace NS --from-uid UID
//	                           approve every claim of a restored namespace at once
//	finale check -f FILE       the deletion test of any operator (package check)
//	finale check -f FILE --validate
//	                           check the description only, start nothing
//	finale version             the module version and commit it was built from
//	finale help [COMMAND]      the usage of finale or of one command, on stdout
//
// It needs nothing but the library module: `go run
// github.com/finale-dev/finale/cmd/finale@VERSION` works from any module.
// finale's own demo, benchmarks and fault scenarios run the reference
// operator, which lives in a module of its own: see scenarios/cmd/finale-lab.
//
// Output: reports and asked-for usage on stdout; errors, progress and the
// usage after a wrong command line on stderr.
//
// Exit status (internal/exitcode's table, the same for finale-lab and the
// Argo guard): 0 success; 1 could not run; 2 a violation (an experiment
// broke, audit findings); 3 audit's pending records only; 64 a usage error
// (unknown command or flag, bad flag value, extra argument); 65 an invalid
// description (check -f), each wrong field named.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/finale-dev/finale/internal/exitcode"
)

const usage = `usage: finale COMMAND [flags]

commands:
  audit [--kubeconfig PATH] [--records-namespace NS] [--settle 5m] [-o text|json]
                                        stuck deletions, cleanup records, unreachable records of a live cluster;
                                        read-only; exits 2 on findings, 3 on pending records only
  approve --namespace NS --from-uid UID [--records-namespace NS] [--dry-run]
                                        approve, in one action, the claim of every restored object of a namespace
                                        that was deleted and created again
  check -f operator.yaml [--quick] [--seed N] [-o text|json] [--report out.md|out.html] [--only EXPERIMENT] [--lanes N]
                                        the deletion test of any operator, on a local control plane of its own;
                                        exits 2 when an experiment broke
  check -f operator.yaml --validate     check the description (fields, templates, paths) and start nothing
  version                               the module version and the commit finale was built from
  help [COMMAND]                        this text, or one command's usage and flags

exit status: 0 success, 1 could not run, 2 a violation (an experiment broke, audit findings),
3 audit's pending records only, 64 usage error, 65 invalid description
`

// Messages of the command line.
const (
	msgNoCommand      = "no command given (finale help lists them)"
	msgUnknownCommand = "unknown command %q (finale help lists them)"
	msgHelpArgs       = "help takes at most one command, got %q"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "finale:", err)
		os.Exit(exitCode(err))
	}
}

// run runs the command line args: what was asked for on stdout, the usage
// after a wrong command line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitcode.Usagef(msgNoCommand)
	}
	switch args[0] {
	case "audit":
		return audit(ctx, args[1:], stdout)
	case "approve":
		return approve(ctx, args[1:], stdout)
	case "check":
		return runCheck(ctx, args[1:], stdout)
	case "version":
		if len(args) > 1 {
			return exitcode.Usagef(msgVersionArgs, args[1:])
		}
		return printVersion(stdout)
	case "help", "-h", "-help", "--help":
		return help(ctx, args[1:], stdout)
	default:
		fmt.Fprint(stderr, usage)
		return exitcode.Usagef(msgUnknownCommand, args[0])
	}
}

// help prints finale's usage, or one command's (as its -h does), on stdout.
func help(ctx context.Context, args []string, stdout io.Writer) error {
	switch {
	case len(args) == 0:
		fmt.Fprint(stdout, usage)
		return nil
	case len(args) > 1:
		return exitcode.Usagef(msgHelpArgs, args)
	}
	switch args[0] {
	case "audit":
		return audit(ctx, []string{"-h"}, stdout)
	case "approve":
		return approve(ctx, []string{"-h"}, stdout)
	case "check":
		return runCheck(ctx, []string{"-h"}, stdout)
	case "version":
		fmt.Fprint(stdout, versionUsage)
		return nil
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return exitcode.Usagef(msgUnknownCommand, args[0])
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/internal/exitcode"
)

const checkUsage = `usage: finale check -f operator.yaml [--quick] [--seed N] [-o text|json] [--report out.md|out.html] [--only EXPERIMENT[,...]] [--runs N] [--lanes N]
       finale check -f operator.yaml --validate

Runs the operator the description file describes against a local control
plane of its own, deletes its objects in every order and under faults, and
checks that every deletion finished, nothing was left in the external
service, nothing was created twice and (with results) no child's result
was lost by its owner. --validate checks the description only (its fields,
templates and paths, and --only's names) and starts nothing.

Exit status: 0 every experiment held (--validate: the description is
valid), 1 the check could not run, 2 an experiment broke, 64 a usage error,
65 an invalid description (each wrong field is named).

Experiments: ` + "%s" + `

flags:
`

// Messages of finale check's command line.
const (
	msgCheckExtraArgs = "unexpected arguments %q: finale check takes only flags (the description is -f FILE)"
	msgNoFile         = "check: -f is required: the description file of the operator under test (see the README's \"Testing your own operator\")"
	msgBadReport      = "check: --report %q: want a .md or .html file"
	msgBadRuns        = "check: --runs %d: want 0 or more"
	msgBadLanes       = "check: --lanes %d: want 1 or more"
	msgBadKillWindow  = "check: --kill-window %s: want 0 or more"
	msgBadOnly        = "check: --only %q: no such experiment (experiments: %s)"
	msgValid          = "%s: a valid description of %s (%d dependents, %d fault points); experiments selected: %s\n"
)

// errViolation marks a check that ran and saw an experiment break.
var errViolation = errors.New("check: an experiment broke")

func runCheck(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	file := fs.String("f", "", "the description file (YAML) of the operator under test (required)")
	quick := fs.Bool("quick", false, "the CI mode: at most 2 dependents, one run per experiment, two kills per crash run (under 3 minutes)")
	seed := fs.Int64("seed", 1, "seed of each experiment's first run; run i uses seed+i")
	output := fs.String("o", "text", "output format on stdout: text or json")
	reportPath := fs.String("report", "", "also write a report with the timeline of each broken run: a .md (Markdown) or .html file")
	only := fs.String("only", "", "comma-separated experiments to run; empty is all")
	runs := fs.Int("runs", 0, "runs per experiment, all run; 0 is the mode's (crash experiments: 3, or 1 with --quick; others 1), an experiment stopping at its first broken run")
	killWindow := fs.Duration("kill-window", 0, "the window the crash experiments' kills fall in; 0 is the creates' and the cleanup's times measured by the first runs (a reproduction names the window of its run)")
	laneCount := fs.Int("lanes", 0, "control planes running experiments side by side; unset is 2 when the probe looks only at the service check starts ({{.ServiceAddr}}) and there are 2 CPUs, else 1; a count asserts each run's probe lists only that run's resources")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	validate := fs.Bool("validate", false, "check the description (fields, templates, paths) and --only, print a summary and exit; starts nothing")
	if helped, err := parseFlags(fs, args, out, fmt.Sprintf(checkUsage, strings.Join(check.Names(), ", "))); helped || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return exitcode.Usagef(msgCheckExtraArgs, fs.Args())
	}
	if *file == "" {
		return exitcode.Usagef(msgNoFile)
	}
	if *output != "text" && *output != "json" {
		return exitcode.Usagef("check: "+msgBadOutput, *output)
	}
	if ext := filepath.Ext(*reportPath); *reportPath != "" && ext != ".md" && ext != ".html" {
		return exitcode.Usagef(msgBadReport, *reportPath)
	}
	if *runs < 0 {
		return exitcode.Usagef(msgBadRuns, *runs)
	}
	lanesSet := false
	fs.Visit(func(f *flag.Flag) { lanesSet = lanesSet || f.Name == "lanes" })
	if lanesSet && *laneCount < 1 {
		return exitcode.Usagef(msgBadLanes, *laneCount)
	}
	if *killWindow < 0 {
		return exitcode.Usagef(msgBadKillWindow, *killWindow)
	}
	var onlyNames []string
	if *only != "" {
		onlyNames = strings.Split(*only, ",")
		for _, n := range onlyNames {
			if !slices.Contains(check.Names(), n) {
				return exitcode.Usagef(msgBadOnly, n, strings.Join(check.Names(), ", "))
			}
		}
	}
	// The operator under test runs as a process with its own log;
	// controller-runtime's packages check uses must not warn that this
	// process set no logger.
	log.SetLogger(logr.Discard())
	spec, err := check.Load(*file)
	if err != nil {
		return exitcode.With(exitcode.BadDescription, err)
	}
	if *validate {
		exps := onlyNames
		if exps == nil {
			exps = check.Names()
		}
		if _, err := fmt.Fprintf(out, msgValid, *file, spec.Name, spec.Dependents.Count, len(spec.Faults), strings.Join(exps, ", ")); err != nil {
			return err
		}
		// What the description leaves out, as the report will say it.
		for _, r := range spec.Skipped() {
			if slices.Contains(exps, r.Name) {
				fmt.Fprintf(out, "skipped %s: %s\n", r.Name, r.Reason)
			}
		}
		for _, n := range spec.Notes() {
			fmt.Fprintf(out, "note: %s\n", n)
		}
		return nil
	}
	opts := check.Options{Quick: *quick, Seed: *seed, Runs: *runs, Lanes: *laneCount, KillWindow: *killWindow, Progress: os.Stderr, Command: "finale check -f " + *file}
	if *quiet {
		opts.Progress = nil
	}
	opts.Only = onlyNames
	rep, err := check.Run(ctx, spec, opts)
	if errors.Is(err, check.ErrSpec) {
		// Run checks the description again (a Go-built one is checked
		// there only): still before anything starts.
		return exitcode.With(exitcode.BadDescription, err)
	} else if err != nil {
		return err
	}
	if *reportPath != "" {
		if err := writeReport(*reportPath, rep); err != nil {
			return err
		}
	}
	if *output == "json" {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return brokenErr(rep.Broken())
	}
	return nil
}

// brokenErr is the error of a check in which the experiments named broke.
func brokenErr(broken []string) error {
	return exitcode.With(exitcode.Violation, fmt.Errorf("%w: %s (reproduce each with the command its section prints)", errViolation, strings.Join(broken, ", ")))
}

func writeReport(path string, rep check.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("check: --report: %w", err)
	}
	if filepath.Ext(path) == ".html" {
		err = rep.WriteHTML(f)
	} else {
		err = rep.WriteMarkdown(f)
	}
	return errors.Join(err, f.Close())
}

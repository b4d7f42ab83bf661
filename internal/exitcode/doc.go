// Package exitcode is the one table of exit statuses of finale's commands:
// cmd/finale (check, audit, version), scenarios/cmd/finale-lab and the Argo
// guard (examples/argo/cmd/guard). A script that runs any of them reads the
// same number the same way:
//
//	0   success: every experiment held, nothing found, a valid description
//	1   could not run: no cluster, a control plane that did not start, an
//	    operator that never became ready, any failure not listed below
//	2   ran and found a violation: an experiment broke (check), findings to
//	    act on (audit), invariants not as expected (finale-lab scenario)
//	3   audit only: no findings, but records still within the settle window
//	64  usage: an unknown command or flag, a bad flag value, an extra
//	    argument (sysexits' EX_USAGE)
//	65  bad description: check's -f file is not a valid description; the
//	    message names each wrong field (sysexits' EX_DATAERR)
//
// 1 to 3 are what the commands always exited with; usage and description
// errors, which exited 1, have their own codes, above the range shells and
// Go use for their own (2 is flag.ExitOnError's, 126 to 165 the shell's),
// so that a caller can tell "fix the command line" from "the run failed".
//
// A command wraps an error with With (or Usagef) where it knows the class;
// Of gives the status of any error, 1 for one never classified.
package exitcode

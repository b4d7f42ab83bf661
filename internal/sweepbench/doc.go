// Package sweepbench measures one sweeper pass over records whose owners
// all exist, on a real API server, against a bare paginated LIST of the
// same records measured in the same process right after it: the cost of
// the sweep at scale (issue 38's 100,000 records). The reference
// operator's go benchmark (examples/postgres/stacktest/sweep) and
// finale-lab bench -all both run it.
package sweepbench

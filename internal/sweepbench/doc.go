// Package sweepbench measures one sweeper pass over records whose owners
// all exist, on a real API server, against a bare paginated LIST of the
// same records measured in the same process right after it: the cost of
// the sweep at scale (100,000 records in make bench). The reference
// operator's go benchmark (examples/postgres/stacktest/sweep) and
// finale-lab bench -all both run it.
package sweepbench

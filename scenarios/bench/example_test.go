package bench_test

import (
	"os"
	"time"

	"github.com/finale-dev/finale/scenarios/bench"
)

// RunLifecycle and RunNamespaceDeletion take a Stack (a control plane's
// config and a PostgreSQL server); LifecycleRows are their figures, which WriteTable prints.
func ExampleWriteTable() {
	l := bench.Lifecycle{Roles: 1000, On: 34900 * time.Millisecond, Off: 30 * time.Second, WritesOn: 5, WritesOff: 3, EventsOn: 1, EventsOff: 1,
		CPUOn: 68 * time.Second, CPUOff: 58 * time.Second, HoldOnly: 32 * time.Second, CPUHoldOnly: 63 * time.Second, StatementsOn: 9, StatementsOff: 9, ReadsOn: 3, ReadsOff: 2,
		CPURequests: 9 * time.Second, SideBySide: []bench.Pair{{On: 26 * time.Second, Off: 20 * time.Second}, {On: 27 * time.Second, Off: 21 * time.Second}},
		SideBySideRecords: []bench.Pair{{On: 24 * time.Second, Off: 20 * time.Second}, {On: 25 * time.Second, Off: 21 * time.Second}},
		SideBySideHold:    []bench.Pair{{On: 22 * time.Second, Off: 20 * time.Second}, {On: 23 * time.Second, Off: 21 * time.Second}}}
	nd := bench.NamespaceDeletion{Roles: 1000, Gone: 20 * time.Second, NaiveGone: 14500 * time.Millisecond, Direct: 100 * time.Millisecond,
		Content: 16 * time.Second, NaiveContent: 14 * time.Second, CPU: 27 * time.Second, NaiveCPU: 18 * time.Second}
	_ = bench.WriteTable(os.Stdout, bench.LifecycleRows(l, nd))
	// Output:
	// benchmark                                                                                  guarantees on       baseline                               on vs baseline                target   met
	// 1000 Roles created then deleted, wall (2 runs each)                                        34.90 s             30.00 s (naive build)                  1.16×                         ≤ 1.15×  no
	// API writes per Role lifecycle                                                              5.00                3.00 (naive build)                     +2.00                         ≤ +2     yes
	// API writes per Role lifecycle, Events included                                             6.00 (1.00 Events)  4.00 (naive build, 1.00 Events)        +2.00                         ≤ 6      yes
	// CPU of the stack's processes, same runs                                                    68.00 s             58.00 s (naive build)                  1.17×                         ≤ 1.25×  yes
	// 1000 Roles created then deleted, the hold alone (no records), wall (2 runs each)           32.00 s             30.00 s (naive build)                  1.07×                         -        -
	// CPU of the stack's processes, the hold alone (no records), same runs                       63.00 s             58.00 s (naive build)                  1.09×                         -        -
	// CPU of the stack's processes, guarantees on and naive at once (2 pairs)                    53.00 s             41.00 s (naive build, same time)       1.29× (pairs 1.29× to 1.30×)  ≤ 1.25×  no
	// CPU of the stack's processes, cleanup records alone (no hold) and naive at once (2 pairs)  49.00 s             41.00 s (naive build, same time)       1.20× (pairs 1.19× to 1.20×)  -        -
	// CPU of the stack's processes, the hold alone (no records) and naive at once (2 pairs)      45.00 s             41.00 s (naive build, same time)       1.10× (pairs 1.10× to 1.10×)  -        -
	// CPU of the guarantees' own API requests, sent alone                                        9.00 s              10.00 s (on minus naive, same runs)    0.90×                         -        -
	// CPU floor of those requests: the naive build's CPU plus theirs                             67.00 s             58.00 s (naive build)                  1.16×                         ≤ 1.25×  yes
	// PostgreSQL round trips per Role lifecycle                                                  9.00                9.00 (naive build)                     +0.00                         -        -
	// API reads through the operator's client per Role lifecycle                                 3.00                2.00 (naive build)                     +1.00                         -        -
	// namespace with 1000 Roles deleted, to gone                                                 20.00 s             14.50 s (naive build, 0 roles leaked)  1.38×                         ≤ 1.5×   yes
	// namespace with 1000 Roles deleted, its Roles and Server gone                               16.00 s             14.00 s (naive build)                  1.14×                         -        -
	// namespace with 1000 Roles deleted, CPU of the stack's processes                            27.00 s             18.00 s (naive build)                  1.50×                         -        -
	// namespace with 1000 Roles deleted, to gone                                                 20.00 s             0.10 s (DROP ROLE directly)            200×                          -        -
}

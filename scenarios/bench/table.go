package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/finale-dev/finale/internal/sweepbench"
)

// Row is one figure of a table: what, with the guarantees on, its
// baseline from the same run, the two compared, the target and whether
// it is met ("-" where there is none).
type Row [6]string

// row formats one Row from tab-separated cells.
func row(format string, args ...any) Row {
	var r Row
	copy(r[:], strings.Split(fmt.Sprintf(format, args...), "\t"))
	return r
}

// WriteTable prints rows under one header, aligned.
func WriteTable(w io.Writer, rows ...[]Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tguarantees on\tbaseline\ton vs baseline\ttarget\tmet")
	for _, rs := range rows {
		for _, r := range rs {
			fmt.Fprintln(tw, strings.Join(r[:], "\t"))
		}
	}
	return tw.Flush()
}

// LifecycleRows are the figures of RunLifecycle and RunNamespaceDeletion.
func LifecycleRows(l Lifecycle, nd NamespaceDeletion) []Row {
	cpu := l.CPURatio()
	rows := []Row{
		row("%d Roles created then deleted, wall (2 runs each)\t%s\t%s (naive build)\t%.2f×\t≤ %.2f×\t%s",
			l.Roles, secs(l.On), secs(l.Off), l.Ratio(), TargetRatio, yes(l.Ratio() <= TargetRatio)),
		row("API writes per Role lifecycle\t%.2f\t%.2f (naive build)\t%+.2f\t≤ %+.0f\t%s",
			l.WritesOn, l.WritesOff, l.ExtraWrites(), TargetExtraWrites, yes(l.ExtraWrites() <= TargetExtraWrites)),
		row("API writes per Role lifecycle, Events included\t%.2f (%.2f Events)\t%.2f (naive build, %.2f Events)\t%+.2f\t≤ %.0f\t%s",
			l.AllWritesOn(), l.EventsOn, l.WritesOff+l.EventsOff, l.EventsOff, l.AllWritesOn()-l.WritesOff-l.EventsOff, TargetAllWrites, yes(l.AllWritesOn() <= TargetAllWrites)),
		row("CPU of the stack's processes, same runs\t%s\t%s (naive build)\t%.2f×\t≤ %.2f×\t%s",
			secs(l.CPUOn), secs(l.CPUOff), cpu, TargetCPURatio, yes(cpu <= TargetCPURatio)),
		row("%d Roles created then deleted, %s, wall (2 runs each)\t%s\t%s (naive build)\t%.2f×\t-\t-",
			l.Roles, holdOnly.name, secs(l.HoldOnly), secs(l.Off), l.HoldOnlyRatio()),
		row("CPU of the stack's processes, %s, same runs\t%s\t%s (naive build)\t%.2f×\t-\t-",
			holdOnly.name, secs(l.CPUHoldOnly), secs(l.CPUOff), l.CPUHoldOnlyRatio()),
	}
	// The guarantees-on pairs have the CPU target; a guarantee alone has
	// none, its row telling what that guarantee costs.
	for _, side := range []struct {
		b     build
		pairs []Pair
	}{{guaranteesOn, l.SideBySide}, {recordsOnly, l.SideBySideRecords}, {holdOnly, l.SideBySideHold}} {
		if len(side.pairs) == 0 {
			continue
		}
		sum, least, most := SideBySide(side.pairs)
		target, met := "-", "-"
		if side.b == guaranteesOn {
			target, met = fmt.Sprintf("≤ %.2f×", TargetCPURatio), yes(sum.Ratio() <= TargetCPURatio)
		}
		rows = append(rows, row("CPU of the stack's processes, %s and naive at once (%d pairs)\t%s\t%s (naive build, same time)\t%.2f× (pairs %.2f× to %.2f×)\t%s\t%s",
			side.b.name, len(side.pairs), secs(sum.On), secs(sum.Off), sum.Ratio(), least, most, target, met))
	}
	return append(rows,
		row("CPU of the guarantees' own API requests, sent alone\t%s\t%s (on minus naive, same runs)\t%.2f×\t-\t-",
			secs(l.CPURequests), secs(l.ExtraCPU()), ratio(l.CPURequests.Seconds(), l.ExtraCPU().Seconds())),
		row("CPU floor of those requests: the naive build's CPU plus theirs\t%s\t%s (naive build)\t%.2f×\t≤ %.2f×\t%s",
			secs(l.CPUOff+l.CPURequests), secs(l.CPUOff), l.CPUFloor(), TargetCPURatio, yes(l.CPUFloor() <= TargetCPURatio)),
		row("PostgreSQL round trips per Role lifecycle\t%.2f\t%.2f (naive build)\t%+.2f\t-\t-",
			l.StatementsOn, l.StatementsOff, l.StatementsOn-l.StatementsOff),
		row("API reads through the operator's client per Role lifecycle\t%.2f\t%.2f (naive build)\t%+.2f\t-\t-",
			l.ReadsOn, l.ReadsOff, l.ReadsOn-l.ReadsOff),
		row("namespace with %d Roles deleted, to gone\t%s\t%s (naive build, %d roles leaked)\t%.2f×\t≤ %.1f×\t%s",
			nd.Roles, secs(nd.Gone), secs(nd.NaiveGone), nd.NaiveLeaked, nd.Ratio(), TargetNamespaceRatio, yes(nd.Ratio() <= TargetNamespaceRatio)),
		row("namespace with %d Roles deleted, its Roles and Server gone\t%s\t%s (naive build)\t%.2f×\t-\t-",
			nd.Roles, secs(nd.Content), secs(nd.NaiveContent), ratio(nd.Content.Seconds(), nd.NaiveContent.Seconds())),
		row("namespace with %d Roles deleted, CPU of the stack's processes\t%s\t%s (naive build)\t%.2f×\t-\t-",
			nd.Roles, secs(nd.CPU), secs(nd.NaiveCPU), ratio(nd.CPU.Seconds(), nd.NaiveCPU.Seconds())),
		row("namespace with %d Roles deleted, to gone\t%s\t%s (DROP ROLE directly)\t%.0f×\t-\t-",
			nd.Roles, secs(nd.Gone), secs(nd.Direct), nd.Gone.Seconds()/nd.Direct.Seconds()),
	)
}

// SweepRows are the figures of a sweep pass (internal/sweepbench), against
// the bare paginated LIST of the same records.
func SweepRows(r sweepbench.Result) []Row {
	pass := fmt.Sprintf("sweep pass over %d records, owners present", r.Records)
	rss := "-"
	if r.PeakRSS > 0 {
		rss = mib(r.PeakRSS)
	}
	return []Row{
		row("%s, time\t%s\t%s (bare paginated LIST)\t%.2f×\t≤ %s\t%s",
			pass, secs(r.Pass), secs(r.List), ratio(r.Pass.Seconds(), r.List.Seconds()), secs(sweepbench.TargetPass), yes(r.Pass <= sweepbench.TargetPass)),
		row("%s, peak heap above the idle process\t%s\t%s (bare paginated LIST)\t%.2f×\t-\t-",
			pass, mib(int64(r.PassHeap)), mib(int64(r.ListHeap)), ratio(float64(r.PassHeap), float64(r.ListHeap))),
		row("%s, the process's peak RSS (owners cached)\t%s\t-\t-\t≤ %d MiB\t%s",
			pass, rss, sweepbench.TargetRSSMiB, yes(r.MetRSS())),
		row("%s, allocated\t%s\t%s (bare paginated LIST)\t%.2f×\t-\t-",
			pass, mib(int64(r.PassAlloc)), mib(int64(r.ListAlloc)), ratio(float64(r.PassAlloc), float64(r.ListAlloc))),
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

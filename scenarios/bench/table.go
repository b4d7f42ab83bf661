package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints the results side by side, each with its baseline and,
// where one is set, its target.
func WriteTable(w io.Writer, l Lifecycle, nd NamespaceDeletion) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tguarantees on\tbaseline\ton vs baseline\ttarget\tmet")
	fmt.Fprintf(tw, "%d Roles created then deleted, wall (2 runs each)\t%s\t%s (naive build)\t%.2f×\t≤ %.2f×\t%s\n",
		l.Roles, secs(l.On), secs(l.Off), l.Ratio(), TargetRatio, yes(l.Ratio() <= TargetRatio))
	fmt.Fprintf(tw, "API writes per Role lifecycle\t%.2f\t%.2f (naive build)\t%+.2f\t≤ %+.0f\t%s\n",
		l.WritesOn, l.WritesOff, l.ExtraWrites(), TargetExtraWrites, yes(l.ExtraWrites() <= TargetExtraWrites))
	fmt.Fprintf(tw, "API writes per Role lifecycle, Events included\t%.2f (%.2f Events)\t%.2f (naive build, %.2f Events)\t%+.2f\t≤ %.0f\t%s\n",
		l.AllWritesOn(), l.EventsOn, l.WritesOff+l.EventsOff, l.EventsOff, l.AllWritesOn()-l.WritesOff-l.EventsOff, TargetAllWrites, yes(l.AllWritesOn() <= TargetAllWrites))
	cpu := l.CPUOn.Seconds() / l.CPUOff.Seconds()
	fmt.Fprintf(tw, "CPU of the stack's processes, same runs\t%s\t%s (naive build)\t%.2f×\t≤ %.2f×\t%s\n",
		secs(l.CPUOn), secs(l.CPUOff), cpu, TargetCPURatio, yes(cpu <= TargetCPURatio))
	fmt.Fprintf(tw, "PostgreSQL round trips per Role lifecycle\t%.2f\t%.2f (naive build)\t%+.2f\t-\t-\n",
		l.StatementsOn, l.StatementsOff, l.StatementsOn-l.StatementsOff)
	fmt.Fprintf(tw, "API reads through the operator's client per Role lifecycle\t%.2f\t%.2f (naive build)\t%+.2f\t-\t-\n",
		l.ReadsOn, l.ReadsOff, l.ReadsOn-l.ReadsOff)
	fmt.Fprintf(tw, "namespace with %d Roles deleted, to gone\t%s\t%s (naive build, %d roles leaked)\t%.2f×\t≤ %.1f×\t%s\n",
		nd.Roles, secs(nd.Gone), secs(nd.NaiveGone), nd.NaiveLeaked, nd.Ratio(), TargetNamespaceRatio, yes(nd.Ratio() <= TargetNamespaceRatio))
	fmt.Fprintf(tw, "namespace with %d Roles deleted, to gone\t%s\t%s (DROP ROLE directly)\t%.0f×\t-\t-\n",
		nd.Roles, secs(nd.Gone), secs(nd.Direct), nd.Gone.Seconds()/nd.Direct.Seconds())
	return tw.Flush()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

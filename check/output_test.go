package check

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func sampleReport() Report {
	broken := RunReport{
		Seed: 7, Verdict: Broke, Elapsed: Duration(31 * time.Second), Expected: 2, Seen: 2, Leaked: []string{"role chk_a_0"},
		Faults:     []string{"froze 1 established connection(s) of db"},
		Violations: []Violation{{Invariant: Finished, Detail: "namespace(s) pg-a not gone 30s after the deletion: Role role-0 [cleanup]"}, {Invariant: NoLeak, Detail: "1 external resource(s) left: role chk_a_0"}},
		LeftBehind: []Object{
			{Kind: "Role", Namespace: "pg-a", Name: "role-0", Deleting: Duration(31 * time.Second), Finalizers: []string{"example.com/cleanup"}},
			{Kind: "Hub", Name: "hub-a", Deleting: Duration(31 * time.Second), Finalizers: []string{"example.com/hold"}},
		},
		Timeline:  []Event{{At: Duration(700 * time.Millisecond), What: "fault: froze 1 | <conn>"}},
		Reproduce: "finale check -f op.yaml --seed 7 --only transport-freeze --runs 1",
	}
	return Report{
		Operator: "widgets", Seed: 7, Elapsed: Duration(time.Minute), Setup: Duration(4 * time.Second),
		Experiments: []Result{
			{Name: OrderAllAtOnce, Verdict: Held, Runs: []RunReport{{Seed: 7, Verdict: Held, Finish: Duration(10 * time.Second), Kills: 0}}},
			{Name: TransportFreeze, Verdict: Broke, Fix: "clientpool", Runs: []RunReport{broken}, Reason: "run 1 broke, which settles the verdict; 2 more run(s) not run (--runs runs them all)"},
			{Name: TransportStall, Verdict: Skipped, Reason: "no http2 fault point"},
			{Name: ResultsStalled, Verdict: Broke, Fix: "capture", Runs: []RunReport{{
				Seed: 7, Verdict: Broke, Finish: Duration(9 * time.Second), Produced: 2, Lost: []string{"wf-0-123"},
				Violations: []Violation{{Invariant: NoLostResult, Detail: "1 result(s) produced by a Pod now gone and never persisted by its owner"}},
			}}},
		},
	}
}

func TestWriteText(t *testing.T) {
	var b strings.Builder
	if err := sampleReport().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"widgets, seed 7, default mode: 3 runs, 0 kills in 1m0s",
		"transport-freeze   BROKE    1     0s    NOT FINISHED  1       0           0",
		"BROKE transport-freeze, seed 7",
		"reproduce: finale check -f op.yaml --seed 7 --only transport-freeze --runs 1",
		"violation finished: namespace(s) pg-a not gone",
		"pg-a       Role  role-0  31s           example.com/cleanup",
		"(cluster)  Hub   hub-a   31s           example.com/hold",
		"    role chk_a_0",
		"skipped transport-stall: no http2 fault point",
		"transport-freeze: run 1 broke, which settles the verdict",
		"results-stalled    BROKE    1     0s    9s            0       0           1     0",
		"violation no-lost-result: 1 result(s) produced by a Pod now gone",
		"results lost (2 produced; these by a child now gone, never persisted by its owner):\n    wf-0-123",
		"BROKE: transport-freeze, results-stalled",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	var b strings.Builder
	rep := sampleReport()
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep.Experiments[1].Runs[0].LeftBehind, got.Experiments[1].Runs[0].LeftBehind); diff != "" {
		t.Errorf("left behind after a JSON round trip (-want +got):\n%s", diff)
	}
	if !strings.Contains(b.String(), `"elapsed": "31s"`) {
		t.Errorf("durations are not written as strings:\n%s", b.String())
	}
}

func TestWriteMarkdownAndHTML(t *testing.T) {
	rep := sampleReport()
	var md, h strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| transport-freeze | **broke** | 1 |", "| results-stalled | **broke** | 1 | 0s | 9s | 0 | 0 | 1 | 0 |", "- **no-lost-result**: 1 result(s)", "Results lost (2 produced; these by a child now gone, never persisted by its owner):\n\n```\nwf-0-123\n```", "## Broke: transport-freeze, seed 7", "| (cluster) | Hub | hub-a | 31s | example.com/hold |", "| +700ms | fault: froze 1 \\| <conn> |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	if err := rep.WriteHTML(&h); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h2>Broke: transport-freeze, seed 7</h2>", "<td>fault: froze 1 | &lt;conn&gt;</td>", "<td><b>broke</b></td>", "<pre>finale check -f op.yaml"} {
		if !strings.Contains(h.String(), want) {
			t.Errorf("HTML lacks %q:\n%s", want, h.String())
		}
	}
}

// A deletion that never ended reads as such on the progress line, never
// as one that took no time.
func TestDeletionCell(t *testing.T) {
	for _, tc := range []struct {
		run  RunReport
		want string
	}{
		{RunReport{Finish: Duration(1500 * time.Millisecond)}, "deletion 1.5s"},
		{RunReport{}, "deletion NOT FINISHED"},
	} {
		if got := deletionCell(tc.run); got != tc.want {
			t.Errorf("deletionCell(Finish %s) = %q, want %q", time.Duration(tc.run.Finish), got, tc.want)
		}
	}
}

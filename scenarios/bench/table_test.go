package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWriteTable(t *testing.T) {
	l := Lifecycle{Roles: 1000, On: 33 * time.Second, Off: 30 * time.Second, WritesOn: 5, WritesOff: 3.4, EventsOn: 1, EventsOff: 1.5, CPUOn: 66 * time.Second, CPUOff: 60 * time.Second,
		HoldOnly: 31500 * time.Millisecond, CPUHoldOnly: 63 * time.Second, StatementsOn: 8, StatementsOff: 8.5, ReadsOn: 3.5, ReadsOff: 3.6,
		CPURequests: 6 * time.Second, SideBySide: []Pair{{On: 26 * time.Second, Off: 20 * time.Second}, {On: 27 * time.Second, Off: 21 * time.Second}},
		SideBySideRecords: []Pair{{On: 24 * time.Second, Off: 20 * time.Second}, {On: 25 * time.Second, Off: 21 * time.Second}},
		SideBySideHold:    []Pair{{On: 22 * time.Second, Off: 20 * time.Second}, {On: 24 * time.Second, Off: 21 * time.Second}}}
	nd := NamespaceDeletion{Roles: 1000, Gone: 48 * time.Second, NaiveGone: 40 * time.Second, NaiveLeaked: 990, Direct: 200 * time.Millisecond,
		Content: 42 * time.Second, NaiveContent: 35 * time.Second, CPU: 30 * time.Second, NaiveCPU: 20 * time.Second}
	var b bytes.Buffer
	if err := WriteTable(&b, LifecycleRows(l, nd)); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var cells []string
		for _, c := range strings.Split(line, "  ") {
			if c = strings.TrimSpace(c); c != "" {
				cells = append(cells, c)
			}
		}
		got = append(got, cells)
	}
	want := [][]string{
		{"benchmark", "guarantees on", "baseline", "on vs baseline", "target", "met"},
		{"1000 Roles created then deleted, wall (2 runs each)", "33.00 s", "30.00 s (naive build)", "1.10×", "≤ 1.15×", "yes"},
		{"API writes per Role lifecycle", "5.00", "3.40 (naive build)", "+1.60", "≤ +2", "yes"},
		{"API writes per Role lifecycle, Events included", "6.00 (1.00 Events)", "4.90 (naive build, 1.50 Events)", "+1.10", "≤ 6", "yes"},
		{"CPU of the stack's processes, same runs", "66.00 s", "60.00 s (naive build)", "1.10×", "≤ 1.25×", "yes"},
		{"1000 Roles created then deleted, the hold alone (no records), wall (2 runs each)", "31.50 s", "30.00 s (naive build)", "1.05×", "-", "-"},
		{"CPU of the stack's processes, the hold alone (no records), same runs", "63.00 s", "60.00 s (naive build)", "1.05×", "-", "-"},
		{"CPU of the stack's processes, guarantees on and naive at once (2 pairs)", "53.00 s", "41.00 s (naive build, same time)", "1.29× (pairs 1.29× to 1.30×)", "≤ 1.25×", "no"},
		{"CPU of the stack's processes, cleanup records alone (no hold) and naive at once (2 pairs)", "49.00 s", "41.00 s (naive build, same time)", "1.20× (pairs 1.19× to 1.20×)", "-", "-"},
		{"CPU of the stack's processes, the hold alone (no records) and naive at once (2 pairs)", "46.00 s", "41.00 s (naive build, same time)", "1.12× (pairs 1.10× to 1.14×)", "-", "-"},
		{"CPU of the guarantees' own API requests, sent alone", "6.00 s", "6.00 s (on minus naive, same runs)", "1.00×", "-", "-"},
		{"CPU floor of those requests: the naive build's CPU plus theirs", "66.00 s", "60.00 s (naive build)", "1.10×", "≤ 1.25×", "yes"},
		{"PostgreSQL round trips per Role lifecycle", "8.00", "8.50 (naive build)", "-0.50", "-", "-"},
		{"API reads through the operator's client per Role lifecycle", "3.50", "3.60 (naive build)", "-0.10", "-", "-"},
		{"namespace with 1000 Roles deleted, to gone", "48.00 s", "40.00 s (naive build, 990 roles leaked)", "1.20×", "≤ 1.5×", "yes"},
		{"namespace with 1000 Roles deleted, its Roles and Server gone", "42.00 s", "35.00 s (naive build)", "1.20×", "-", "-"},
		{"namespace with 1000 Roles deleted, CPU of the stack's processes", "30.00 s", "20.00 s (naive build)", "1.50×", "-", "-"},
		{"namespace with 1000 Roles deleted, to gone", "48.00 s", "0.20 s (DROP ROLE directly)", "240×", "-", "-"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("table (-want +got):\n%s\n%s", diff, b.String())
	}
	l.On = 40 * time.Second
	b.Reset()
	if err := WriteTable(&b, LifecycleRows(l, nd)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Split(b.String(), "\n")[1], "no") {
		t.Fatalf("a missed ratio target is not reported:\n%s", b.String())
	}
}

func TestSideBySide(t *testing.T) {
	for _, tc := range []struct {
		name        string
		pairs       []Pair
		sum         Pair
		least, most float64
	}{
		{name: "none"},
		{name: "one", pairs: []Pair{{On: 3 * time.Second, Off: 2 * time.Second}}, sum: Pair{On: 3 * time.Second, Off: 2 * time.Second}, least: 1.5, most: 1.5},
		{
			name:  "the least and the most of any pair, the sums' ratio",
			pairs: []Pair{{On: 12 * time.Second, Off: 10 * time.Second}, {On: 9 * time.Second, Off: 10 * time.Second}, {On: 15 * time.Second, Off: 10 * time.Second}},
			sum:   Pair{On: 36 * time.Second, Off: 30 * time.Second}, least: 0.9, most: 1.5,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sum, least, most := SideBySide(tc.pairs)
			if diff := cmp.Diff([]any{tc.sum, tc.least, tc.most}, []any{sum, least, most}); diff != "" {
				t.Errorf("SideBySide (-want +got):\n%s", diff)
			}
		})
	}
}

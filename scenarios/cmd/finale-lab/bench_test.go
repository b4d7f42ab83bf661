package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBenchAll runs `finale-lab bench -all` small end to end: the sweep's
// pass, the lifecycle runs of every build and both builds' namespace
// deletion, the run at
// scale with the operator as a child process and the API server's
// metrics, all in one table with one record a Role.
func TestBenchAll(t *testing.T) {
	var out bytes.Buffer
	args := []string{"bench", "-all", "-roles", "4", "-namespaces", "2", "-roles-per-namespace", "3", "-records", "50"}
	if err := run(t.Context(), args, &out); err != nil {
		t.Fatalf("finale-lab %v: %v\n%s", args, err, out.String())
	}
	_, table, _ := strings.Cut(out.String(), "\nbenchmark ")
	for _, want := range []string{
		"4 Roles created then deleted, wall (2 runs each)",
		"API writes per Role lifecycle",
		"4 Roles created then deleted, the hold alone (no records), wall (2 runs each)",
		"CPU of the stack's processes, the hold alone (no records), same runs",
		"CPU of the stack's processes, guarantees on and naive at once (4 pairs)",
		"CPU of the guarantees' own API requests, sent alone",
		"CPU floor of those requests: the naive build's CPU plus theirs",
		"CPU of the stack's processes, cleanup records alone (no hold) and naive at once (4 pairs)",
		"CPU of the stack's processes, the hold alone (no records) and naive at once (4 pairs)",
		"namespace with 4 Roles deleted, to gone",
		"namespace with 4 Roles deleted, its Roles and Server gone",
		"namespace with 4 Roles deleted, CPU of the stack's processes",
		"6 Roles in 2 namespaces created, to all Ready",
		"6 Roles in 2 namespaces deleted, to all gone",
		"operator peak RSS",
		"API server LIST requests",
		"sweep pass over 50 records, owners present, time",
		"sweep pass over 50 records, owners present, the process's peak RSS",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
	// Six lifecycle runs (three builds, twice each), twelve pairs side by
	// side (three builds against the naive build, four times) and four
	// namespace deletions, each on servers of its own; the direct drops
	// need PostgreSQL alone.
	if n, want := strings.Count(out.String(), "on a control plane of its own"), 34; n != want {
		t.Errorf("%d runs on a control plane of their own, want %d:\n%s", n, want, out.String())
	}
	if n, want := strings.Count(out.String(), "on a PostgreSQL of its own"), 35; n != want {
		t.Errorf("%d runs on a PostgreSQL of their own, want %d:\n%s", n, want, out.String())
	}
	if n := strings.Count(out.String(), "\nbenchmark "); n != 1 {
		t.Errorf("%d tables, want one:\n%s", n, out.String())
	}
	var records string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "cleanup records in etcd") {
			records = strings.Join(strings.Fields(line), " ")
		}
	}
	if want := "all Ready 6 ConfigMaps 0 (naive build) +6 1 a Role (6) yes"; !strings.HasSuffix(records, want) {
		t.Errorf("records row %q, want it to end %q", records, want)
	}
}

func TestBenchArguments(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"zero roles":                {args: []string{"bench", "-roles", "0"}, want: "positive number"},
		"extra argument":            {args: []string{"bench", "x"}, want: `unexpected argument "x"`},
		"bad flag":                  {args: []string{"bench", "-no-such-flag"}, want: "no-such-flag"},
		"scale, zero namespaces":    {args: []string{"bench", "-scale", "-namespaces", "0"}, want: "give positive numbers"},
		"scale, zero per namespace": {args: []string{"bench", "-scale", "-roles-per-namespace", "0"}, want: "give positive numbers"},
		"zero records":              {args: []string{"bench", "-all", "-records", "0"}, want: "positive number of records"},
		"all and scale":             {args: []string{"bench", "-all", "-scale"}, want: "give one of them"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), tc.args, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run(%v) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}

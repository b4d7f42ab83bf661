package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBench runs `finale-lab bench` on a few Roles end to end: its own stack,
// both builds, the namespace deletion, the table.
func TestBench(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"bench", "-roles", "5"}, &out); err != nil {
		t.Fatalf("finale-lab bench: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"5 Roles created then deleted, wall (2 runs each)",
		"API writes per Role lifecycle",
		"namespace with 5 Roles deleted, to gone",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBenchScale runs `finale-lab bench -scale` small end to end: both
// builds, the operator as a child process, the API server's metrics, the
// table with one record a Role.
func TestBenchScale(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"bench", "-scale", "-namespaces", "2", "-roles-per-namespace", "3"}, &out); err != nil {
		t.Fatalf("finale-lab bench -scale: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"6 Roles in 2 namespaces created, to all Ready",
		"6 Roles in 2 namespaces deleted, to all gone",
		"operator peak RSS",
		"API server LIST requests",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench -scale output lacks %q:\n%s", want, out.String())
		}
	}
	var records string
	for _, line := range strings.Split(out.String(), "\n") {
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

package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemo runs `finale-lab demo` end to end, so the README's first command
// cannot rot: it exits non-zero when any guarantee fails.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"demo"}, &out); err != nil {
		t.Fatalf("finale-lab demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"evicted by the pool's policy",
		"terminating and held (hold.finale.dev/hold)",
		"by default, verifies the certificate",
		"the role dropped through the Role's own Server (verify-full)",
		"0 leaked",
		"every guarantee held",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"nope"}, &out); err == nil || !strings.Contains(err.Error(), `unknown command "nope"`) {
		t.Fatalf("run(nope) = %v, want an unknown-command error", err)
	}
	if err := run(t.Context(), nil, &out); err == nil {
		t.Fatal("run() with no command succeeded")
	}
}

func TestScenarioArguments(t *testing.T) {
	var out bytes.Buffer
	for name, args := range map[string][]string{
		"no name":      {"scenario"},
		"unknown name": {"scenario", "no-such-scenario"},
		"bad flag":     {"scenario", "campaign", "--no-such-flag"},
		"bad election": {"scenario", "failover", "--election", "slow"},
	} {
		t.Run(name, func(t *testing.T) {
			err := run(t.Context(), args, &out)
			if err == nil {
				t.Fatalf("run(%v) succeeded", args)
			}
			switch name {
			case "bad flag":
			case "bad election":
				if !strings.Contains(err.Error(), "fast or operator") {
					t.Errorf("error does not list the presets: %v", err)
				}
			default:
				if !strings.Contains(err.Error(), "poisoned-client") {
					t.Errorf("error does not list the scenarios: %v", err)
				}
			}
		})
	}
}

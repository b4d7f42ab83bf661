package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/finale-dev/finale/check"
	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/internal/testenv"
)

// ciWorkflow is the worked workflow docs/check-in-ci.md explains.
const ciWorkflow = "../../docs/examples/finale-check.yml"

// workflow is the part of a GitHub Actions workflow the test reads.
type workflow struct {
	Jobs map[string]ciJob `json:"jobs"`
}

type ciJob struct {
	Env   map[string]string `json:"env"`
	Steps []struct {
		Name string            `json:"name"`
		Uses string            `json:"uses"`
		Run  string            `json:"run"`
		Env  map[string]string `json:"env"`
	} `json:"steps"`
}

// The CI recipe works as written: every `run:` of the worked workflow,
// exactly, in order, from the repository's root, with bash as GitHub runs
// a step (-e, pipefail); the `uses:` steps (checkout, Go, the cache, the
// upload) are GitHub's own and stand as they are. The check step exits 0
// on the key operator and leaves the JSON report, which parses, and the
// HTML report where the upload step takes them.
//
// What differs from a runner, and why: loopback only (GOPROXY=off: every
// module is in the cache the test was built from; FINALE_KUBE_RELEASE_URL
// =off: kubeinstall finds the binaries make test put in ~/.cache/finale
// and downloads nothing); GOFLAGS carries the test binary's compile flags
// (-race, no DWARF) so that the builds reuse its compiled packages instead
// of compiling client-go and controller-runtime again; and
// FINALE_CHECK_ONLY, the workflow's own knob, selects order-all-at-once
// alone: the key operator under every experiment of --quick is
// examples/keys/check's proof, and repeating it here would add about three
// minutes to make test. Measured alone on 2 shared cores: 64 s, of which
// kubeinstall 2 s, the three builds 29 s (warm: mostly linking race-built
// binaries) and the check 32 s (the control plane's start, then the one
// run, mostly the namespace controller's own pace).
func TestCIWorkflow(t *testing.T) {
	job := loadCIJob(t)
	tmp := t.TempDir()
	env := append(ciEnv(job, tmp),
		"GOPROXY=off",
		"FINALE_KUBE_RELEASE_URL=off",
		"GOFLAGS="+strings.Join(testenv.CompileFlags(), " "),
		"FINALE_CHECK_ONLY="+check.OrderAllAtOnce,
	)
	ran := 0
	for i, s := range job.Steps {
		if s.Run == "" {
			continue
		}
		name := cmp.Or(s.Name, fmt.Sprintf("step %d", i+1))
		t0 := time.Now()
		code, out := runStep(t, s.Run, append(slices.Clone(env), envList(s.Env)...))
		t.Logf("%s: exit %d in %s", name, code, time.Since(t0).Round(100*time.Millisecond))
		if code != exitcode.OK {
			t.Fatalf("%s: exit status %d, want %d:\n%s", name, code, exitcode.OK, out)
		}
		ran++
	}
	if ran != 3 {
		t.Errorf("ran %d run: steps, want 3 (the binaries, the build, the check)", ran)
	}
	// The artifacts, as the upload step names them.
	j, err := os.ReadFile(filepath.Join(tmp, "finale-check.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep check.Report
	if err := json.Unmarshal(j, &rep); err != nil {
		t.Fatalf("the JSON report does not parse: %v\n%s", err, j)
	}
	if diff := gocmp.Diff(map[string]check.Verdict{check.OrderAllAtOnce: check.Held}, rep.Verdicts()); diff != "" {
		t.Errorf("the JSON report's verdicts (-want +got):\n%s", diff)
	}
	h, err := os.ReadFile(filepath.Join(tmp, "finale-check.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(h), "<!doctype html>") || !strings.Contains(string(h), check.OrderAllAtOnce) {
		t.Errorf("the HTML report is not a page naming %s:\n%s", check.OrderAllAtOnce, h)
	}
}

// The check step returns finale's exit status, whatever it is, and says in
// the log which kind of failure it was: run with a stand-in finale that
// only exits with the status given (no control plane: the statuses other
// than 0 are not worth a real run each here; cmd/finale's own tests prove
// when finale returns which).
func TestCIWorkflowExitStatus(t *testing.T) {
	job := loadCIJob(t)
	var step string
	for _, s := range job.Steps {
		if s.Name == "finale check" {
			step = s.Run
		}
	}
	if step == "" {
		t.Fatalf("%s: no step named finale check", ciWorkflow)
	}
	for code, want := range map[int]string{
		exitcode.OK:             "every experiment held",
		exitcode.Violation:      "::error::finale check: an experiment broke",
		exitcode.Failed:         "::error::finale check could not run (exit status 1)",
		exitcode.Usage:          "::error::finale check could not run (exit status 64)",
		exitcode.BadDescription: "::error::finale check could not run (exit status 65)",
	} {
		tmp := t.TempDir()
		stub := filepath.Join(tmp, "bin", "finale")
		if err := os.MkdirAll(filepath.Dir(stub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stub, fmt.Appendf(nil, "#!/bin/sh\nexit %d\n", code), 0o755); err != nil {
			t.Fatal(err)
		}
		got, out := runStep(t, step, ciEnv(job, tmp))
		if got != code || !strings.Contains(out, want) {
			t.Errorf("finale exiting %d: the step exits %d, want %d, and says:\n%s\nwant it to say %q", code, got, code, out, want)
		}
	}
}

// loadCIJob reads the workflow's one job.
func loadCIJob(t *testing.T) ciJob {
	t.Helper()
	b, err := os.ReadFile(ciWorkflow)
	if err != nil {
		t.Fatal(err)
	}
	var wf workflow
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("%s: %v", ciWorkflow, err)
	}
	job, ok := wf.Jobs["deletion"]
	if !ok || len(wf.Jobs) != 1 {
		t.Fatalf("%s: want one job, deletion; have %d", ciWorkflow, len(wf.Jobs))
	}
	return job
}

// ciEnv is a step's environment on a runner whose temporary directory is
// tmp: this process's, then the job's.
func ciEnv(job ciJob, tmp string) []string {
	return append(append(os.Environ(), envList(job.Env)...), "RUNNER_TEMP="+tmp)
}

func envList(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// runStep runs a step's script as a GitHub runner does on Linux (bash
// --noprofile --norc -eo pipefail), from the repository's root, and
// returns its exit status and output.
func runStep(t *testing.T, script string, env []string) (int, string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = root, env
	out, err := cmd.CombinedOutput()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatalf("bash: %v", err)
	}
	return 0, string(out)
}

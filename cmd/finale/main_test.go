package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/finale-dev/finale/internal/exitcode"
	"github.com/finale-dev/finale/internal/testenv"
)

// runMainEnv makes the test binary run finale's main instead of the tests,
// so that TestCommandLine sees what a user sees: the exit status and the
// two streams of the real process.
const runMainEnv = "FINALE_TEST_RUN_MAIN"

func init() {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
}

// finale runs the command line in a process of its own.
func finale(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), exe, args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("finale %q: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// A description whose paths exist, valid but for what the cases change.
const cliSpec = `operator:
  command: [./operator, '--kubeconfig={{.Kubeconfig}}']
crds: [crds]
faults: [{name: db, address: "127.0.0.1:5432"}]
dependents:
  count: 2
  template: '{apiVersion: example.com/v1, kind: Widget, metadata: {name: w-{{.Index}}}}'
probe:
  command: [./probe]
timeouts: {finish: 1m}
`

func writeSpec(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCommandLine: every class of outcome exits with internal/exitcode's
// status; what was asked for goes to stdout, errors and the usage after a
// wrong command line to stderr, and an error names the command it is
// about.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "crds"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeSpec(t, filepath.Join(dir, "crds"), "widgets.yaml", "{}")
	valid := writeSpec(t, dir, "valid.yaml", cliSpec)
	badDuration := writeSpec(t, dir, "duration.yaml", strings.Replace(cliSpec, "finish: 1m", "finish: soon", 1))
	noCRDs := writeSpec(t, dir, "nocrds.yaml", strings.Replace(cliSpec, "crds: [crds]", "crds: [config/crd]", 1))
	// The same Widget, cluster-scoped by its CRD: its fixed name would
	// clash between runs.
	if err := os.Mkdir(filepath.Join(dir, "clustercrds"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeSpec(t, filepath.Join(dir, "clustercrds"), "widgets.yaml", "{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, "+
		"metadata: {name: widgets.example.com}, spec: {group: example.com, scope: Cluster, names: {kind: Widget, plural: widgets}}}")
	clusterFixed := writeSpec(t, dir, "cluster.yaml", strings.Replace(cliSpec, "crds: [crds]", "crds: [clustercrds]", 1))
	noProbe := writeSpec(t, dir, "noprobe.yaml", strings.Replace(strings.Replace(cliSpec, "probe:\n  command: [./probe]\n", "  ready: {condition: Ready}\n", 1),
		"faults: [{name: db, address: \"127.0.0.1:5432\"}]\n", "", 1))

	// A cluster nothing listens for: the audit cannot run.
	dead := filepath.Join(dir, "dead")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.AuthInfos["dead"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: "dead"}
	kc.CurrentContext = "dead"
	if err := clientcmd.WriteToFile(*kc, dead); err != nil {
		t.Fatal(err)
	}

	type want struct {
		code           int
		stdout, stderr []string // each must appear
		quietStdout    bool     // nothing on stdout
		quietStderr    bool     // nothing on stderr
	}
	for name, tc := range map[string]struct {
		args []string
		want want
	}{
		"version":          {[]string{"version"}, want{code: exitcode.OK, stdout: []string{"finale "}, quietStderr: true}},
		"help":             {[]string{"help"}, want{code: exitcode.OK, stdout: []string{"usage: finale COMMAND", "64 usage error"}, quietStderr: true}},
		"help check":       {[]string{"help", "check"}, want{code: exitcode.OK, stdout: []string{"usage: finale check", "-validate", "65 an invalid description"}, quietStderr: true}},
		"help audit":       {[]string{"help", "audit"}, want{code: exitcode.OK, stdout: []string{"usage: finale audit", "-settle"}, quietStderr: true}},
		"help approve":     {[]string{"help", "approve"}, want{code: exitcode.OK, stdout: []string{"usage: finale approve", "-from-uid", "-dry-run"}, quietStderr: true}},
		"approve required": {[]string{"approve", "--namespace", "team-a"}, want{code: exitcode.Usage, stderr: []string{"--namespace and --from-uid are required"}, quietStdout: true}},
		"approve extra":    {[]string{"approve", "--namespace", "team-a", "--from-uid", "x", "now"}, want{code: exitcode.Usage, stderr: []string{`unexpected arguments ["now"]: finale approve takes only flags`}, quietStdout: true}},
		"help version":     {[]string{"help", "version"}, want{code: exitcode.OK, stdout: []string{"usage: finale version"}, quietStderr: true}},
		"check -h":         {[]string{"check", "-h"}, want{code: exitcode.OK, stdout: []string{"usage: finale check"}, quietStderr: true}},
		"validate":         {[]string{"check", "-f", valid, "--validate"}, want{code: exitcode.OK, stdout: []string{"a valid description of valid (2 dependents, 1 fault points)"}, quietStderr: true}},
		"validate, no probe": {[]string{"check", "-f", noProbe, "--validate"}, want{code: exitcode.OK, stdout: []string{"a valid description of noprobe (2 dependents, 0 fault points)",
			"skipped escaped: the description has no probe", "skipped transport-freeze: the description has no fault points", "note: no-leak and no-duplicate"}, quietStderr: true}},
		"validate only":    {[]string{"check", "-f", valid, "--validate", "--only", "order-all-at-once"}, want{code: exitcode.OK, stdout: []string{"experiments selected: order-all-at-once\n"}}},
		"no command":       {nil, want{code: exitcode.Usage, stderr: []string{"usage: finale COMMAND", "no command given"}, quietStdout: true}},
		"unknown command":  {[]string{"chek"}, want{code: exitcode.Usage, stderr: []string{"usage: finale COMMAND", `unknown command "chek"`}, quietStdout: true}},
		"help unknown":     {[]string{"help", "chek"}, want{code: exitcode.Usage, stderr: []string{`unknown command "chek"`}, quietStdout: true}},
		"unknown flag":     {[]string{"check", "-f", valid, "--bogus"}, want{code: exitcode.Usage, stderr: []string{"finale: check: flag provided but not defined: -bogus (finale help check lists the flags)"}, quietStdout: true}},
		"bad flag value":   {[]string{"audit", "--settle", "soon"}, want{code: exitcode.Usage, stderr: []string{"audit: invalid value \"soon\" for flag -settle", "finale help audit"}, quietStdout: true}},
		"check extra":      {[]string{"check", "-f", valid, "now"}, want{code: exitcode.Usage, stderr: []string{`unexpected arguments ["now"]: finale check takes only flags`}, quietStdout: true}},
		"audit extra":      {[]string{"audit", "now"}, want{code: exitcode.Usage, stderr: []string{`unexpected arguments ["now"]: finale audit takes only flags`}, quietStdout: true}},
		"version extra":    {[]string{"version", "now"}, want{code: exitcode.Usage, stderr: []string{`finale version takes none`}, quietStdout: true}},
		"no -f":            {[]string{"check"}, want{code: exitcode.Usage, stderr: []string{"-f is required"}, quietStdout: true}},
		"unknown only":     {[]string{"check", "-f", valid, "--only", "order-al"}, want{code: exitcode.Usage, stderr: []string{`--only "order-al": no such experiment`}, quietStdout: true}},
		"bad duration":     {[]string{"check", "-f", badDuration, "--validate"}, want{code: exitcode.BadDescription, stderr: []string{`timeouts.finish: "soon" is not a duration`}, quietStdout: true}},
		"missing CRDs":     {[]string{"check", "-f", noCRDs}, want{code: exitcode.BadDescription, stderr: []string{"crds[0]: ", "config/crd: no such file or directory"}, quietStdout: true}},
		"cluster fixed":    {[]string{"check", "-f", clusterFixed, "--validate"}, want{code: exitcode.BadDescription, stderr: []string{`dependents.template: Widget is cluster-scoped and its name "w-0" is the same in every run`, "{{.Run}}"}, quietStdout: true}},
		"missing file":     {[]string{"check", "-f", filepath.Join(dir, "none.yaml"), "--validate"}, want{code: exitcode.BadDescription, stderr: []string{"none.yaml"}, quietStdout: true}},
		"cannot run audit": {[]string{"audit", "--kubeconfig", dead}, want{code: exitcode.Failed, stderr: []string{"cannot reach the cluster at https://127.0.0.1:1"}, quietStdout: true}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := finale(t, tc.args...)
			if code != tc.want.code {
				t.Errorf("finale %q exits %d, want %d\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.want.code, stdout, stderr)
			}
			for _, w := range tc.want.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("finale %q: stdout lacks %q:\n%s", tc.args, w, stdout)
				}
			}
			for _, w := range tc.want.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("finale %q: stderr lacks %q:\n%s", tc.args, w, stderr)
				}
			}
			if tc.want.quietStdout && stdout != "" {
				t.Errorf("finale %q: want nothing on stdout, got:\n%s", tc.args, stdout)
			}
			if tc.want.quietStderr && stderr != "" {
				t.Errorf("finale %q: want nothing on stderr, got:\n%s", tc.args, stderr)
			}
		})
	}
}

// TestCommandLineViolation: a violation found is exit status 2, from the
// real process against the package's control plane: an object deleting for
// longer than --settle is an audit finding.
func TestCommandLineViolation(t *testing.T) {
	t.Parallel()
	c := testenv.Client(t, testenv.Scheme())
	ns := testenv.Namespace(t, c)
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = ns, "stuck"
	cm.Finalizers = []string{testFinalizer}
	if err := c.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	deletingSince(t, c, cm)
	code, stdout, stderr := finale(t, "audit", "--kubeconfig", testenv.ControlPlane(t).Kubeconfig, "--settle", "1ns")
	if code != exitcode.Violation {
		t.Errorf("finale audit exits %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitcode.Violation, stdout, stderr)
	}
	if !strings.Contains(stdout, ns+"/stuck") {
		t.Errorf("the report on stdout does not list %s/stuck:\n%s", ns, stdout)
	}
	if !strings.Contains(stderr, "audit found problems") {
		t.Errorf("stderr does not say the audit found problems:\n%s", stderr)
	}
	// check's broken experiment maps to the same status.
	if diff := cmp.Diff(exitcode.Violation, exitCode(brokenErr([]string{"order-all-at-once"}))); diff != "" {
		t.Errorf("a broken experiment's exit status (-want +got):\n%s", diff)
	}
}

func TestVersionLine(t *testing.T) {
	for name, tc := range map[string]struct {
		bi   debug.BuildInfo
		want string
	}{
		"release": {debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}},
			"finale v0.1.0 (go1.26.8)"},
		"checkout": {debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "8a1a18b0123456789abcdef0123456789abcdef0"}, {Key: "vcs.modified", Value: "true"}}},
			"finale (devel) (commit 8a1a18b01234, modified, go1.26.8)"},
		"pseudo-version, clean": {debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20261205171150-8a1a18b01234"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "8a1a18b0123456789abcdef0123456789abcdef0"}, {Key: "vcs.modified", Value: "false"}}},
			"finale v0.1.1-0.20261205171150-8a1a18b01234 (commit 8a1a18b01234, go1.26.8)"},
		"nothing stamped": {debug.BuildInfo{}, "finale (devel)"},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, versionLine(&tc.bi)); diff != "" {
				t.Errorf("versionLine (-want +got):\n%s", diff)
			}
		})
	}
}

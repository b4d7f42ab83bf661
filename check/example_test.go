package check_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/finale-dev/finale/check"
)

// A description file, checked in quick mode; the exit status of `finale
// check` is 2 when an experiment broke, as here a non-nil error from
// Broken would be.
func Example() {
	spec, err := check.Load("operator.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	rep, err := check.Run(context.Background(), spec, check.Options{Quick: true, Seed: 1, Progress: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // the check could not run
		return
	}
	_ = rep.WriteText(os.Stdout)
	if !rep.OK() {
		fmt.Println("broke:", strings.Join(rep.Broken(), ", "))
	}
}

// A description is checked before anything starts: every field that is
// wrong is named.
func ExampleParse() {
	_, err := check.Parse([]byte(`
operator:
  comand: [./bin/operator]
crds: [config/crd]
`), ".")
	fmt.Println(err)
	_, err = check.Parse([]byte(`
operator:
  command: [./bin/operator, '--db={{.Proxy "dbb"}}']
crds: [config/crd]
faults: [{name: db, address: "127.0.0.1:5432"}]
parent:
  secret: '{apiVersion: v1, kind: Secret, metadata: {name: creds}}'
  object: '{apiVersion: example.com/v1, kind: Connection, metadata: {name: conn}}'
dependents:
  count: 2
  template: '{apiVersion: example.com/v1, kind: Widget, metadata: {name: w}}'
probe:
  command: [./bin/list-widgets]
`), ".")
	fmt.Println(err)
	// Output:
	// check: invalid description: unknown field "operator.comand"
	// check: invalid description:
	//   operator.command[1]: template: operator.command[1]:1:7: executing "operator.command[1]" at <.Proxy>: error calling Proxy: no fault point "dbb" (faults: db)
}

// An operator that makes nothing outside the cluster is described without
// a probe and without fault points, its dependents ready by a JSONPath
// expression; what that leaves out is said before a run (finale check
// --validate prints the same).
func ExampleSpec_Skipped() {
	spec, err := check.Parse([]byte(`
operator: {command: [./bin/operator, '--kubeconfig={{.Kubeconfig}}']}
crds: [config/crd]
dependents:
  count: 2
  template: '{apiVersion: example.com/v1, kind: Widget, metadata: {name: w-{{.Index}}}}'
  ready: {jsonPath: '{.status.phase}', value: Bound}
`), ".")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range spec.Skipped() {
		fmt.Printf("skipped %s: %s\n", r.Name, r.Reason)
	}
	for _, n := range spec.Notes() {
		fmt.Println("note:", n)
	}
	// Output:
	// skipped order-parent-first: the description has no parent (connection) object
	// skipped order-secret-first: the description has no credential Secret (parent.secret)
	// skipped operator-down: timeouts.hold is not set: the operator's own longest deletion timeout, which the operator stays down past
	// skipped escaped: the description has no probe: nothing would show what the sweeper left
	// skipped transport-freeze: the description has no fault points (no external service)
	// skipped transport-stall: no fault point has protocol http2 (a stall needs HTTP/2 framing; transport-freeze covers plain TCP)
	// skipped results-stalled: the description gives no results (result-capture children)
	// note: no-leak and no-duplicate (what the operator makes in an external service) were not checked, and escaped is skipped: the description gives no probe (an operator that makes no external resource)
	// note: no-lost-result (owners whose result-capture children must not lose a result) was not checked: the description gives no results (results.children, results.probe, results.complete)
}

// A description built in Go, for an operator run in-process (its manager's
// Start) with a probe function; Test fails the test, with the Markdown
// report, when an experiment broke. (t is the test's *testing.T.)
func Example_inProcess() {
	var t *testing.T // the test's
	spec := &check.Spec{
		Operator: check.Operator{Start: func(ctx context.Context, e check.OperatorEnv) error {
			// mgr, _ := ctrl.NewManager(e.Config, ...); set the operator up,
			// dialling e.Values.Proxy("api"); return mgr.Start(ctx)
			<-ctx.Done()
			return nil
		}},
		CRDs:   []string{"config/crd/bases"},
		Faults: []check.FaultPoint{{Name: "api", Address: "127.0.0.1:8080"}},
		Parent: check.Parent{
			Secret: `{apiVersion: v1, kind: Secret, metadata: {name: creds}, stringData: {token: t0k3n}}`,
			Object: `{apiVersion: example.com/v1, kind: Connection, metadata: {name: conn}, spec: {url: "http://{{.Proxy "api"}}"}}`,
		},
		Dependents: check.Dependents{Count: 3, Ready: &check.Readiness{Condition: "Ready"},
			Template: `{apiVersion: example.com/v1, kind: Widget, metadata: {name: w-{{.Index}}}, spec: {connection: conn}}`},
		Probe: check.Probe{Func: func(ctx context.Context, v check.Values) ([]string, error) {
			return []string{"widget-1"}, nil // what the service holds
		}},
	}
	rep := check.Test(t, spec, check.Options{Quick: true, Only: []string{check.OrderAllAtOnce, check.TransportFreeze}})
	_ = rep.Verdicts()
}

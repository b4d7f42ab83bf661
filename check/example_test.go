package check_test

import (
	"context"
	"fmt"
	"os"
	"strings"

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

package crd_test

import (
	"fmt"

	"github.com/finale-dev/finale/examples/temporal/config/crd"
)

// The generated definitions, ready for controlplane.InstallCRDs or a client's
// Create.
func ExampleCRDs() {
	crds, err := crd.CRDs()
	if err != nil {
		panic(err)
	}
	for _, c := range crds {
		fmt.Println(c.Name, c.Spec.Scope)
	}
	// Output:
	// connections.temporal.finale.dev Namespaced
	// workerdeployments.temporal.finale.dev Namespaced
}

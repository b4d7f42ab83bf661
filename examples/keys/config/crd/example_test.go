package crd_test

import (
	"fmt"

	"github.com/finale-dev/finale/examples/keys/config/crd"
)

// The definitions, decoded from the embedded YAML, ready for
// testenv.Options.CRDs.
func ExampleCRDs() {
	crds, err := crd.CRDs()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range crds {
		fmt.Println(c.Name, c.Spec.Names.Kind)
	}
	// Output:
	// apikeys.keys.finale.dev APIKey
	// keyservers.keys.finale.dev KeyServer
}

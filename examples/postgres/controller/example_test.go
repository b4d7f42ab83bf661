package controller_test

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/examples/postgres/controller"
)

// Wire the operator into a manager; records go to the operator's own
// namespace.
func ExampleSetup() {
	var mgr ctrl.Manager // from ctrl.NewManager, with v1alpha1 in its scheme
	if mgr == nil {
		fmt.Println("needs a manager")
		return
	}
	op, err := controller.Setup(mgr, controller.Options{RecordsNamespace: "finale-system"})
	fmt.Println(op != nil, err)
	// Output: needs a manager
}

package controller_test

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/examples/temporal/controller"
)

// Wire the operator into a manager whose scheme has the example's kinds.
func ExampleSetup() {
	var mgr ctrl.Manager // from ctrl.NewManager, with v1alpha1 in its scheme
	if mgr == nil {
		fmt.Println("needs a manager")
		return
	}
	op, err := controller.Setup(mgr, controller.Options{})
	fmt.Println(op != nil, err)
	// Output: needs a manager
}

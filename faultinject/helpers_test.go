package faultinject_test

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

func predicateFunc(f func(client.Object) bool) predicate.Predicate {
	return predicate.NewPredicateFuncs(f)
}

// ctrlOpts skips the controller-name uniqueness check: each test builds its
// own manager, and controller-runtime's check is process-wide.
func ctrlOpts() controller.Options {
	skip := true
	return controller.Options{SkipNameValidation: &skip}
}

package controller_test

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/controller"
)

// An operator's main: a scheme with the key kinds, a manager, Setup, Start.
// Setup reads (or creates) the operator key in the records namespace
// before the manager starts.
func ExampleSetup() {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := ctrl.SetupSignalHandler()
	if _, err := controller.Setup(ctx, mgr, controller.Options{RecordsNamespace: "keys-system"}); err != nil {
		fmt.Println(err)
		return
	}
	_ = mgr.Start(ctx)
}

// Command keysoperator is a user's operator, in a module of the user's
// own, built from finale's second worked example as a dependency: the
// APIKey controller of github.com/finale-dev/finale/examples/keys, run in
// a manager. modproxy's TestConsumer builds and tests it against finale's
// module zip, served by a file-based GOPROXY.
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/controller"
)

// Scheme is the operator's: the built-in kinds and the key kinds.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// Setup registers the APIKey controller, with its records (and the
// operator key) in namespace.
func Setup(ctx context.Context, mgr manager.Manager, namespace string, skipNameValidation bool) error {
	_, err := controller.Setup(ctx, mgr, controller.Options{RecordsNamespace: namespace, SkipNameValidation: skipNameValidation})
	return err
}

func main() {
	ctx := ctrl.SetupSignalHandler()
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: Scheme()})
	if err == nil {
		err = Setup(ctx, mgr, os.Getenv("POD_NAMESPACE"), false)
	}
	if err == nil {
		err = mgr.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

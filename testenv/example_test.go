package testenv_test

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/testenv"
)

// Start an environment with a CRD from a file, delete a namespace and wait
// until the namespace controller has removed it, then stop. In a test
// package, testenv.Main does the start and the stop.
func Example() {
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{CRDPaths: []string{"testdata/crd"}, Log: io.Discard})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer env.Stop()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "example"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		fmt.Println(err)
		return
	}
	if err := controlplane.DeleteAndWait(ctx, env.Client, ns, time.Minute); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("namespace gone")
	// Output: namespace gone
}

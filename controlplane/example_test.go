package controlplane_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
)

// Start a control plane, create a namespace, delete it and wait until the
// namespace controller has removed it.
func Example() {
	ctx := context.Background()
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cp.Stop()

	c, err := client.New(cp.Config, client.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "example"}}
	if err := c.Create(ctx, ns); err != nil {
		fmt.Println(err)
		return
	}
	if err := controlplane.DeleteAndWait(ctx, c, ns, time.Minute); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("namespace gone")
	// Output: namespace gone
}

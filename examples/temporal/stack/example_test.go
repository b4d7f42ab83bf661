package stack_test

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/finale-dev/finale/examples/temporal/stack"
)

// The seed's steps on a running stack: a Connection before its Secret, the
// Secret, a version from a real worker, the poisoning, the deletion.
func ExampleStart() {
	var cfg *rest.Config // a control plane's (controlplane.Start)
	if cfg == nil {
		fmt.Println("needs a control plane and a Temporal server")
		return
	}
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{Config: cfg, HostPort: "127.0.0.1:7233", Namespace: "default"})
	if err != nil {
		panic(err)
	}
	defer func() { _ = s.Stop() }()
	ns, _ := s.Namespace(ctx, "g1-")
	_ = s.Connection(ctx, ns)
	w, _ := s.WorkerDeployment(ctx, ns, "app")
	_ = s.APIKeySecret(ctx, ns)
	_, _ = s.WaitCondition(ctx, w, "Ready", "True", "Available")
	_ = s.AddVersion(ctx, w.Spec.DeploymentName, "v1")
	_, _ = s.Poison()
	_ = s.C.Delete(ctx, w)
	// Output: needs a control plane and a Temporal server
}

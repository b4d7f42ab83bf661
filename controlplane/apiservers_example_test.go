package controlplane_test

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/finale-dev/finale/controlplane"
)

// Two apiservers on one etcd: a manager whose cache lists and watches
// through the second, two seconds behind, while its writes and live reads
// go to the first.
func ExampleControlPlane_AddAPIServer() {
	ctx := context.Background()
	cp, err := controlplane.Start(ctx, controlplane.Options{APIServers: 2})
	if err != nil {
		panic(err)
	}
	defer cp.Stop()
	lagging := cp.APIServers()[1]
	lagging.EtcdLink.SetLag(2 * time.Second)

	mgr, err := manager.New(cp.Config, manager.Options{
		NewCache: func(_ *rest.Config, o cache.Options) (cache.Cache, error) {
			o.HTTPClient = nil
			return cache.New(lagging.Config, o)
		},
	})
	if err != nil {
		panic(err)
	}
	var c client.Reader = mgr.GetClient() // reads from the lagging cache; writes go to the first apiserver
	fmt.Println(len(cp.APIServers()), "apiservers", c != nil)
}

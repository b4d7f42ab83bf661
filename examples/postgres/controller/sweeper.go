package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
)

// dropRole drops role name while it carries tag. A role of that name with
// another tag (or none) is not that role: it is left alone, as
// catalog.DropRole does, and the ID's role counts as gone, because it does
// not exist. A recorded ID whose create never succeeded (the Role adapter
// declares IDs before creating, and the name may be taken) must not hold a
// deletion or the sweeper forever; the ledger's final proof still confirms
// that nothing carrying the tag remains.
func dropRole(ctx context.Context, c *Conn, name, tag string) error {
	err := catalog.DropRole(ctx, c, name, tag)
	if ce, ok := errors.AsType[*catalog.Error](err); ok && ce.Reason == catalog.ReasonNotOwned {
		return nil
	}
	return err
}

// designated lists the Servers an admin designated for sweeping: every
// Server in the operator's own namespace (where tenants cannot create
// any), and the ones named namespace/name in extra. The sweeper uses
// those, and the Server a record was created through while it still
// exists; never a tenant's other Servers, which could point at a copy of
// the deployment.
func designated(r client.Reader, namespace string, extra []types.NamespacedName) func(ctx context.Context) ([]client.Object, error) {
	return func(ctx context.Context) ([]client.Object, error) {
		var out []client.Object
		if namespace != "" {
			var list v1alpha1.ServerList
			if err := r.List(ctx, &list, client.InNamespace(namespace)); err != nil {
				return nil, fmt.Errorf("list Servers in %s for the sweeper: %w", namespace, err)
			}
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
		}
		for _, n := range extra {
			var s v1alpha1.Server
			if err := r.Get(ctx, n, &s); err != nil {
				if client.IgnoreNotFound(err) == nil {
					continue
				}
				return nil, fmt.Errorf("get designated sweep Server %s: %w", n, err)
			}
			out = append(out, &s)
		}
		return out, nil
	}
}

// ParseServers reads a comma-separated list of namespace/name Servers (the
// operator's --sweep-servers flag).
func ParseServers(s string) ([]types.NamespacedName, error) {
	var out []types.NamespacedName
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		ns, name, ok := strings.Cut(f, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("sweep Server %q is not namespace/name", f)
		}
		out = append(out, types.NamespacedName{Namespace: ns, Name: name})
	}
	return out, nil
}

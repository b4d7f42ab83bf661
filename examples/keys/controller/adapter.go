package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/keys/api/v1alpha1"
	"github.com/finale-dev/finale/examples/keys/keyclient"
	"github.com/finale-dev/finale/examples/keys/service"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// adapter is the APIKey kind's lifecycle adapter: the key service's verbs
// and nothing else. The finalizer, the cleanup record, adoption by tag,
// the hold, the watchdog, eviction and status are lifecycle's. Its size is
// the point of this example, and TestAdapterSize holds the figure the
// README and doc.go state.
type adapter struct {
	keyServers
}

func (a adapter) Connect(ctx context.Context, k *v1alpha1.APIKey) (lifecycle.Connection[Key], error) {
	return a.connect(ctx, k.Namespace, k.Spec.KeyServerRef.Name)
}

func (a adapter) ConnectParent(ctx context.Context, p client.Object) (Key, error) {
	return a.key(ctx, p.(*v1alpha1.KeyServer))
}

// Prove is the service's identity endpoint: it answers the question where
// the identity's token is stored.
func (adapter) Prove(ctx context.Context, c *keyclient.Client, q ledger.Question) (ledger.Answer, error) {
	return c.Prove(ctx, q)
}

func (adapter) Observe(ctx context.Context, c *keyclient.Client, k *v1alpha1.APIKey, tag string) (lifecycle.Observation, error) {
	keys, err := c.List(ctx, tag)
	obs := lifecycle.Observation{UpToDate: true}
	for _, got := range keys {
		obs.IDs, obs.UpToDate = append(obs.IDs, got.ID), obs.UpToDate && got.Matches(service.KeySpec{Name: k.Spec.Name, Scopes: k.Spec.Scopes})
	}
	return obs, err
}

func (adapter) Create(ctx context.Context, c *keyclient.Client, k *v1alpha1.APIKey, tag string) (string, error) {
	made, err := c.Create(ctx, tag, service.KeySpec{Name: k.Spec.Name, Scopes: k.Spec.Scopes})
	return made.ID, err
}

func (adapter) Update(ctx context.Context, c *keyclient.Client, k *v1alpha1.APIKey, id, tag string) error {
	return c.Update(ctx, id, tag, service.KeySpec{Name: k.Spec.Name, Scopes: k.Spec.Scopes})
}

func (adapter) Delete(ctx context.Context, c *keyclient.Client, id, tag string) error {
	return c.Delete(ctx, id, tag)
}

func (adapter) Retag(ctx context.Context, c *keyclient.Client, id, from, to string) error {
	return c.Retag(ctx, id, from, to)
}

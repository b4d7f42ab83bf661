package controller

import (
	"context"
	"sync"

	sdkclient "go.temporal.io/sdk/client"
)

// ClientPool keeps one SDK client per key for the life of the process.
// A client leaves it only through EvictClient.
type ClientPool struct {
	dial *dialer

	mu      sync.RWMutex
	clients map[ClientPoolKey]sdkclient.Client // guarded by mu
}

// NewClientPool returns an empty pool that dials with d.
func NewClientPool(d *dialer) *ClientPool {
	return &ClientPool{dial: d, clients: map[ClientPoolKey]sdkclient.Client{}}
}

// GetSDKClient returns key's cached client, if there is one.
func (p *ClientPool) GetSDKClient(key ClientPoolKey) (sdkclient.Client, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	c, ok := p.clients[key]
	return c, ok
}

// DialAndUpsertClient dials a client for key and caches it, closing the
// one it replaces.
func (p *ClientPool) DialAndUpsertClient(ctx context.Context, key ClientPoolKey) (sdkclient.Client, error) {
	c, err := p.dial.Dial(ctx, key)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.clients[key]; ok {
		old.Close()
	}
	p.clients[key] = c
	return c, nil
}

// EvictClient closes and forgets key's client; it does nothing when there
// is none.
func (p *ClientPool) EvictClient(key ClientPoolKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[key]; ok {
		c.Close()
		delete(p.clients, key)
	}
}

// Close closes every cached client.
func (p *ClientPool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, c := range p.clients {
		c.Close()
		delete(p.clients, key)
	}
	return nil
}

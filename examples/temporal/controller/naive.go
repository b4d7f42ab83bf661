package controller

import (
	"context"
	"sync"
	"time"

	sdkclient "go.temporal.io/sdk/client"

	"github.com/finale-dev/finale/lifecycle"
)

// naivePool mirrors the client pool of temporal-worker-controller v1.7
// (internal/controller/clientpool and its call sites): a map of SDK
// clients, a dial on a miss, and eviction only when a call on the main
// reconcile path fails with PermissionDenied or Unauthenticated; the
// deletion path never evicts. It is the baseline of the comparisons: do
// not use it.
//
// Two deviations, neither of which changes what the comparison measures: a
// client replaced by a concurrent dial is closed (upstream overwrites it
// and leaks its connection), and a call is bounded by callTimeout (upstream
// relies on the SDK's default of 10 s, which is what callTimeout defaults
// to).
type naivePool struct {
	dial        *dialer
	callTimeout time.Duration

	mu sync.RWMutex
	// clients holds the cached client per key; guarded by mu.
	clients map[Key]sdkclient.Client
}

func newNaivePool(d *dialer, callTimeout time.Duration) *naivePool {
	return &naivePool{dial: d, callTimeout: callTimeout, clients: map[Key]sdkclient.Client{}}
}

// pathKey carries a call's *callPath in its context.
type pathKey struct{}

// callPath is set by naiveAdapter when the call is for a deleting object:
// upstream's handleDeletion, which never evicts.
type callPath struct{ deleting bool }

// Do implements lifecycle.Pool.
func (p *naivePool) Do(ctx context.Context, key Key, fn func(ctx context.Context, c sdkclient.Client) error) error {
	p.mu.RLock()
	c, ok := p.clients[key]
	p.mu.RUnlock()
	if !ok {
		var err error
		if c, err = p.dial.Dial(ctx, key); err != nil {
			return err
		}
		p.mu.Lock()
		if old, ok := p.clients[key]; ok {
			old.Close()
		}
		p.clients[key] = c
		p.mu.Unlock()
	}
	callCtx, cancel := context.WithTimeout(ctx, p.callTimeout)
	defer cancel()
	path := &callPath{}
	err := fn(context.WithValue(callCtx, pathKey{}, path), c)
	if err != nil && !path.deleting && isAccessDenied(err) {
		p.evict(key, c)
	}
	return err
}

func (p *naivePool) evict(key Key, c sdkclient.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clients[key] == c {
		delete(p.clients, key)
		c.Close()
	}
}

// Len is the number of cached clients.
func (p *naivePool) Len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.clients)
}

// Close closes every cached client.
func (p *naivePool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, c := range p.clients {
		c.Close()
		delete(p.clients, k)
	}
	return nil
}

// naiveAdapter tells naivePool which path a call is on: a call for a
// deleting object is upstream's handleDeletion. lifecycle's cleanup looks
// the deployment up (Observe, which sees the object) before it deletes
// (Delete, which does not), inside the same pool call, so marking in
// Observe covers the whole deletion path.
type naiveAdapter struct{ adapter }

func markPath(ctx context.Context, obj *wd) {
	if p, ok := ctx.Value(pathKey{}).(*callPath); ok && !obj.DeletionTimestamp.IsZero() {
		p.deleting = true
	}
}

func (a naiveAdapter) Observe(ctx context.Context, c sdkclient.Client, obj *wd, tag string) (lifecycle.Observation, error) {
	markPath(ctx, obj)
	return a.adapter.Observe(ctx, c, obj, tag)
}

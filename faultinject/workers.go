package faultinject

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Gate pauses one controller's workers while every other controller in the
// same manager keeps running: the seed of G3 is an owner whose workers lag
// while the children's release path goes on.
//
// A paused Reconcile blocks until Resume or until its context ends; it does
// not fail, so no backoff is added and the request is not lost.
type Gate struct {
	// Inner is the reconciler that runs when the gate is open.
	Inner reconcile.Reconciler

	mu      sync.Mutex    // guards open and waiting
	open    chan struct{} // closed while the gate is open; nil means open
	waiting int
}

// Pause stops new reconciles from running; reconciles already running finish.
func (g *Gate) Pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		g.open = make(chan struct{})
	}
}

// Resume lets waiting and new reconciles run.
func (g *Gate) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
}

// Waiting counts reconciles blocked on the gate right now.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// Reconcile implements reconcile.Reconciler.
func (g *Gate) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	g.mu.Lock()
	ch := g.open
	if ch != nil {
		g.waiting++
	}
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
		if ctx.Err() != nil {
			return reconcile.Result{}, ctx.Err()
		}
	}
	return g.Inner.Reconcile(ctx, req)
}

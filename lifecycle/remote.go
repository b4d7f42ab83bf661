package lifecycle

import (
	"context"
	"fmt"
	"sync/atomic"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/ledger"
)

// remote is the service behind one connection, reached through the pool:
// every call to it is one pool.Do. The call timeout so bounds each external
// call alone, never the API server reads and record writes between them (a
// slow API server must not evict a healthy client, and a call abandoned at
// its timeout must not be in the middle of writing records), and a broken
// client is evicted at whichever call finds it. It is the ledger's Prover
// and Target for the reconciler and the sweeper alike.
type remote[O client.Object, K comparable, C any] struct {
	r   *Reconciler[O, K, C]
	key K
}

func (r *Reconciler[O, K, C]) remote(key K) remote[O, K, C] {
	return remote[O, K, C]{r: r, key: key}
}

// do runs fn with the pooled client, bounded and classified by the pool.
// A call abandoned at its timeout may still finish later and write what fn
// captured, so a result is read only after a nil error.
func (x remote[O, K, C]) do(ctx context.Context, fn func(ctx context.Context, c C) error) error {
	return x.r.pool.Do(ctx, x.key, fn)
}

func (x remote[O, K, C]) Prove(ctx context.Context, q ledger.Question) (ledger.Answer, error) {
	var a ledger.Answer
	err := x.do(ctx, func(ctx context.Context, c C) error {
		var err error
		a, err = x.r.adapter.Prove(ctx, c, q)
		return err
	})
	if err != nil {
		return ledger.Answer{}, err
	}
	return a, nil
}

func (x remote[O, K, C]) Delete(ctx context.Context, id, tag string) error {
	return x.do(ctx, func(ctx context.Context, c C) error { return x.r.adapter.Delete(ctx, c, id, tag) })
}

// own returns a copy of obj for a call's body: a body the pool abandoned at
// its bound runs on while the reconciler goes on writing obj (its status,
// its finalizer), so the two must not share it.
func own[O client.Object](obj O) O { return obj.DeepCopyObject().(O) }

func (x remote[O, K, C]) observe(ctx context.Context, obj O, tag string) (Observation, error) {
	var obs Observation
	obj = own(obj)
	err := x.do(ctx, func(ctx context.Context, c C) error {
		var err error
		obs, err = x.r.adapter.Observe(ctx, c, obj, tag)
		return err
	})
	if err != nil {
		return Observation{}, err
	}
	return obs, nil
}

// Body states of a create (remote.create).
const (
	createWaiting int32 = iota
	createSent
	createWithdrawn
)

// create creates through the pool. An error from a call whose body never
// ran (no client could be dialled) wraps ledger.ErrNotSent, and the body is
// withdrawn first, so that one the pool abandoned before it started cannot
// start later: the ledger then waits for no landing.
func (x remote[O, K, C]) create(ctx context.Context, obj O, tag string) (string, error) {
	var id string
	var state atomic.Int32
	obj = own(obj)
	err := x.do(ctx, func(ctx context.Context, c C) error {
		if !state.CompareAndSwap(createWaiting, createSent) {
			return ledger.ErrNotSent
		}
		var err error
		id, err = x.r.adapter.Create(ctx, c, obj, tag)
		return err
	})
	if err != nil {
		if state.CompareAndSwap(createWaiting, createWithdrawn) {
			return "", fmt.Errorf("%w: %w", ledger.ErrNotSent, err)
		}
		return "", err
	}
	return id, nil
}

func (x remote[O, K, C]) update(ctx context.Context, obj O, id, tag string) error {
	obj = own(obj)
	return x.do(ctx, func(ctx context.Context, c C) error { return x.r.adapter.Update(ctx, c, obj, id, tag) })
}

func (x remote[O, K, C]) retag(ctx context.Context, rt Retagger[C], id, from, to string) error {
	return x.do(ctx, func(ctx context.Context, c C) error { return rt.Retag(ctx, c, id, from, to) })
}

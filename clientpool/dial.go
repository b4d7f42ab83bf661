package clientpool

import (
	"context"
	"fmt"
	"time"
)

// Dialed is what a dial made: the client and, when it cannot be used
// forever, the time from which it must not be (an mTLS client
// certificate's NotAfter, a token's expiry). The pool retires the client
// at NotAfter by its clock, as it does at MaxAge.
type Dialed[C any] struct {
	Client C
	// NotAfter, when set, is the first instant at which the client is no
	// longer used: a call starting then or later gets a fresh dial. The
	// zero time means no expiry of its own.
	NotAfter time.Time
}

// DialedFn is a dial that says when its client expires. Given as
// Options.Dial the pool reads its NotAfter; given to DoWith or AcquireWith
// it is the call's own dial, so that arguments the caller has at hand (a
// Secret it has just read, a resolved endpoint) reach the dial without a
// context value.
type DialedFn[K comparable, C any] func(ctx context.Context, key K) (Dialed[C], error)

// Dial calls f and drops NotAfter, so that a DialedFn is a Dialer. The
// pool itself never calls it: it calls f and keeps NotAfter.
func (f DialedFn[K, C]) Dial(ctx context.Context, key K) (C, error) {
	d, err := f(ctx, key)
	return d.Client, err
}

// dialedOf is d as a DialedFn: itself when it is one, else a wrapper
// whose clients do not expire.
func dialedOf[K comparable, C any](d Dialer[K, C]) DialedFn[K, C] {
	if f, ok := d.(DialedFn[K, C]); ok {
		return f
	}
	return func(ctx context.Context, key K) (Dialed[C], error) {
		c, err := d.Dial(ctx, key)
		return Dialed[C]{Client: c}, err
	}
}

// DialError is the error of a dial that made no usable client: the dial
// failed, the Fence refused it, or its client had expired already. Every
// caller waiting on that dial gets it. Err is the dial's own error;
// errors.Is and errors.As see through it.
type DialError struct {
	// Pool is the pool's Options.Name.
	Pool string
	// Key is the key the dial was for (a K; keys hold no secrets).
	Key any
	Err error
}

func (e *DialError) Error() string {
	return fmt.Sprintf("clientpool %s: dial %v: %v", e.Pool, e.Key, e.Err)
}

// Unwrap returns the dial's own error.
func (e *DialError) Unwrap() error { return e.Err }

// msgExpiredAtDial says why a dialled client was refused.
const msgExpiredAtDial = "the dialled client expired at %s, not after now (%s) on the pool's clock"

// CloseFunc adapts a close that cannot fail (Temporal's client.Client.Close,
// a method value's func()) to Closer; CloseFn is for one that returns an
// error.
type CloseFunc[C any] func(c C)

// Close calls f and returns nil.
func (f CloseFunc[C]) Close(c C) error {
	f(c)
	return nil
}

package lifecycle

import (
	"context"
	"errors"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/ledger"
)

// Connection says where an object's external resource lives.
type Connection[K comparable] struct {
	// Key selects the pooled client (clientpool key): everything the client
	// is bound to at dial time, nothing secret.
	Key K
	// Parent is the connection object the managed object references (a
	// Server, say), nil when it does not exist. With a hold configured it is
	// what the hold keeps while this object still needs it.
	Parent client.Object
}

// Observation is what the external service holds for one object.
type Observation struct {
	// IDs are the exact IDs of the resources carrying the object's ownership
	// tag; empty when there is none.
	IDs []string
	// UpToDate reports that the resource matches the spec; ignored when IDs
	// is empty.
	UpToDate bool
}

// Adapter is everything the reconciler needs to know about one managed kind
// O, reached through clients C pooled by key K. Every method that takes a C
// is called inside the pool's Do, so its errors decide eviction.
type Adapter[O client.Object, K comparable, C any] interface {
	// Connect reads what obj references and returns the pool key and the
	// parent (nil Parent, nil error when the parent is gone).
	Connect(ctx context.Context, obj O) (Connection[K], error)
	// Prove answers q from inside the deployment c reaches, with one round
	// trip: its identity, its sentinel for q.KeyID (enrolled first when
	// q.Enroll is set and there is none), the IDs carrying q.Tag, and the
	// response computed where the sentinel's token is stored (see
	// ledger.Respond). Never from a cache.
	Prove(ctx context.Context, c C, q ledger.Question) (ledger.Answer, error)
	// Observe finds the resources that carry tag and whether they match
	// obj's spec. A resource with obj's name but another tag is someone
	// else's: return an error (see NeedsAction), never adopt it.
	Observe(ctx context.Context, c C, obj O, tag string) (Observation, error)
	// Create creates the resource carrying tag and returns its ID.
	Create(ctx context.Context, c C, obj O, tag string) (id string, err error)
	// Update brings the resource with id (carrying tag) in line with obj's
	// spec.
	Update(ctx context.Context, c C, obj O, id, tag string) error
	// Delete deletes the resource with id only if it carries tag. No
	// resource with id carrying tag (gone, never made, someone else's) is
	// success (nil). It gets no object: the sweeper calls it for owners
	// that are gone, with what the record holds.
	Delete(ctx context.Context, c C, id, tag string) error
}

// Declarer is an optional extension of Adapter for kinds whose external ID
// is known before the create (a name taken from the spec, say). The
// reconciler then writes the ID into the cleanup record with the write that
// precedes the create, so a create that returns that ID needs no second
// record write, and a create interrupted before it could tag the resource
// still leaves a record naming it. A create that returns another ID still
// gets it recorded.
//
// Declare only an ID whose Delete checks the ownership tag (or that is
// unique to obj): a recorded ID is deleted even when the create never made
// it.
type Declarer[O client.Object] interface {
	// DeclareID returns the ID Create will return for obj and tag, and
	// false when it cannot be known in advance.
	DeclareID(obj O, tag string) (id string, ok bool)
}

// Retagger is an optional extension of Adapter that lets an object adopt
// the resources of a previous object of the same kind, namespace and name
// (restored from a backup, re-created by GitOps): it moves the resource
// with id from tag from to tag to, and does nothing to a resource that
// carries neither. Without it such an object reports AdoptionUnsupported.
type Retagger[C any] interface {
	Retag(ctx context.Context, c C, id, from, to string) error
}

// ParentConnector is an optional extension of Adapter: the pool key of a
// parent object itself, for the sweeper, which has no managed object to
// Connect from (its owner is gone). Reconciler.SweepTargets needs it.
type ParentConnector[K comparable] interface {
	ConnectParent(ctx context.Context, parent client.Object) (K, error)
}

// Authenticator is an optional extension of Adapter, for the sweeper: what
// makes sure that a connection made with key reaches the deployment itself
// and not a copy of it that a proxy in the path put in its place, such as
// "TLS verify-full against the CA in Secret x" (sweep.Candidate's
// Authentication); "" when nothing does. A proof cannot tell a copy from
// the deployment: the copy holds the same sentinel. An adapter without it
// has no authenticated connection, and the sweeper keeps every record of
// its kind whose owner went without its delete (sweep.Unverified); Setup
// refuses such an adapter unless its Kind says so
// (Kind.UnauthenticatedNeverSwept).
type Authenticator[K comparable] interface {
	Authentication(key K) string
}

// AdapterFuncs adapts functions to Adapter. It implements Declarer too:
// with DeclareIDFn nil it declares nothing. It implements ParentConnector
// when ConnectParentFn is set (SweepTargets and Setup check that it is),
// and Authenticator when AuthenticationFn is set.
type AdapterFuncs[O client.Object, K comparable, C any] struct {
	ConnectFn       func(ctx context.Context, obj O) (Connection[K], error)
	ProveFn         func(ctx context.Context, c C, q ledger.Question) (ledger.Answer, error)
	ObserveFn       func(ctx context.Context, c C, obj O, tag string) (Observation, error)
	CreateFn        func(ctx context.Context, c C, obj O, tag string) (string, error)
	UpdateFn        func(ctx context.Context, c C, obj O, id, tag string) error
	DeleteFn        func(ctx context.Context, c C, id, tag string) error
	DeclareIDFn     func(obj O, tag string) (string, bool)
	ConnectParentFn func(ctx context.Context, parent client.Object) (K, error)
	// AuthenticationFn is Authenticator's Authentication; nil is no
	// Authenticator at all (Setup then asks for
	// Kind.UnauthenticatedNeverSwept).
	AuthenticationFn func(key K) string
}

// errNoConnectParent is what ConnectParent of AdapterFuncs without
// ConnectParentFn returns; configuration checks refuse such an adapter
// before it can be called.
var errNoConnectParent = errors.New("lifecycle: AdapterFuncs.ConnectParentFn is nil")

// ConnectParent calls ConnectParentFn.
func (f AdapterFuncs[O, K, C]) ConnectParent(ctx context.Context, parent client.Object) (K, error) {
	if f.ConnectParentFn == nil {
		var zero K
		return zero, errNoConnectParent
	}
	return f.ConnectParentFn(ctx, parent)
}

// connectsParent reports whether ConnectParent has a function to call.
func (f AdapterFuncs[O, K, C]) connectsParent() bool { return f.ConnectParentFn != nil }

// Authentication calls AuthenticationFn; "" (nothing authenticates the
// connection) when it is nil.
func (f AdapterFuncs[O, K, C]) Authentication(key K) string {
	if f.AuthenticationFn == nil {
		return ""
	}
	return f.AuthenticationFn(key)
}

// authenticates reports whether Authentication has a function to call.
func (f AdapterFuncs[O, K, C]) authenticates() bool { return f.AuthenticationFn != nil }

// authenticator reports whether a says what authenticates its
// connections: it implements Authenticator, and AdapterFuncs with a
// function to call.
func authenticator[K comparable](a any) bool {
	_, ok := a.(Authenticator[K])
	if f, optional := a.(interface{ authenticates() bool }); optional && !f.authenticates() {
		return false
	}
	return ok
}

// parentConnector returns a's ParentConnector, if it has a working one.
func parentConnector[K comparable](a any) (ParentConnector[K], bool) {
	pc, ok := a.(ParentConnector[K])
	if f, optional := a.(interface{ connectsParent() bool }); optional && !f.connectsParent() {
		return nil, false
	}
	return pc, ok
}

// DeclareID calls DeclareIDFn; false when it is nil.
func (f AdapterFuncs[O, K, C]) DeclareID(obj O, tag string) (string, bool) {
	if f.DeclareIDFn == nil {
		return "", false
	}
	return f.DeclareIDFn(obj, tag)
}

// Connect calls ConnectFn.
func (f AdapterFuncs[O, K, C]) Connect(ctx context.Context, obj O) (Connection[K], error) {
	return f.ConnectFn(ctx, obj)
}

// Prove calls ProveFn.
func (f AdapterFuncs[O, K, C]) Prove(ctx context.Context, c C, q ledger.Question) (ledger.Answer, error) {
	return f.ProveFn(ctx, c, q)
}

// Observe calls ObserveFn.
func (f AdapterFuncs[O, K, C]) Observe(ctx context.Context, c C, obj O, tag string) (Observation, error) {
	return f.ObserveFn(ctx, c, obj, tag)
}

// Create calls CreateFn.
func (f AdapterFuncs[O, K, C]) Create(ctx context.Context, c C, obj O, tag string) (string, error) {
	return f.CreateFn(ctx, c, obj, tag)
}

// Update calls UpdateFn.
func (f AdapterFuncs[O, K, C]) Update(ctx context.Context, c C, obj O, id, tag string) error {
	return f.UpdateFn(ctx, c, obj, id, tag)
}

// Delete calls DeleteFn.
func (f AdapterFuncs[O, K, C]) Delete(ctx context.Context, c C, id, tag string) error {
	return f.DeleteFn(ctx, c, id, tag)
}

// Pool runs a call with the pooled client for a key.
// *clientpool.Pool[K, C] implements it; the interface exists so that the
// reconciler takes the narrowest role.
type Pool[K comparable, C any] interface {
	Do(ctx context.Context, key K, fn func(ctx context.Context, c C) error) error
}

// NeedsAction is an error only the user can resolve (a database still in
// use, a role that still owns objects, a name taken by someone else). Its
// Action (or, when Action is empty, the text of Err) is the Synced
// condition's whole message, so write it for the object's users: nothing
// that wraps the NeedsAction (the pool's dial error naming the address, a
// caller's context) reaches the status; the whole error goes to the log.
// The reconciler keeps retrying, and nothing is forced.
type NeedsAction struct {
	// Reason is the condition reason, a constant of the adapter's package.
	Reason string
	// Action says what the user must do; empty when Err already says it.
	Action string
	Err    error
}

func (e *NeedsAction) Error() string {
	switch {
	case e.Err == nil:
		return e.Action
	case e.Action == "":
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Action
}

// Unwrap lets errors.Is/As and errclass see the cause.
func (e *NeedsAction) Unwrap() error { return e.Err }

// asNeedsAction finds a NeedsAction in err's chain.
func asNeedsAction(err error) (*NeedsAction, bool) {
	var na *NeedsAction
	ok := errors.As(err, &na)
	return na, ok
}

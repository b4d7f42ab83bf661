package faultinject

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// Verb names a client call. Status and other subresource writes are their
// own verbs: a crash after a status write is a different schedule from a
// crash after the spec write before it.
type Verb string

// The verbs a Fault can match.
const (
	Get          Verb = "get"
	List         Verb = "list"
	Create       Verb = "create"
	Update       Verb = "update"
	Patch        Verb = "patch"
	Delete       Verb = "delete"
	DeleteAllOf  Verb = "deleteallof"
	StatusUpdate Verb = "status-update"
	StatusPatch  Verb = "status-patch"
)

// IsWrite reports whether v changes the apiserver's state.
func (v Verb) IsWrite() bool { return v != Get && v != List }

// ErrCrashed is returned by every call after a Crash fault fired, until
// Script.Recover: a crashed process makes no more calls.
var ErrCrashed = errors.New("faultinject: the process crashed after a write")

// Fault is one scripted fault. Zero fields match anything.
type Fault struct {
	// Verb and Kind select calls (empty matches every verb / kind).
	Verb Verb
	Kind string
	// Nth fires on the Nth matching call (1-based); 0 fires on every one.
	Nth int
	// Err is returned instead of making the call; the call does not land.
	Err error
	// Latency delays the call. It is a fault, not a decision, so it uses
	// real time.
	Latency time.Duration
	// Crash lets the call land, then calls the Script's OnCrash and fails
	// every later call with ErrCrashed.
	Crash bool
}

// Call is one call the client made, in order.
type Call struct {
	Verb      Verb
	Kind      string
	Namespace string
	Name      string
	// Err is what the caller got back.
	Err error
}

// Script holds the faults and the record of calls. Safe for concurrent use.
type Script struct {
	// OnCrash runs once, right after the write that a Crash fault chose
	// lands; a harness cancels the manager's context here so its in-memory
	// state (caches, client pools) is dropped.
	OnCrash func()

	mu      sync.Mutex // guards everything below
	faults  []*armed
	calls   []Call
	crashed bool
}

type armed struct {
	Fault
	seen int
}

// NewScript returns a script with the given faults.
func NewScript(faults ...Fault) *Script {
	s := &Script{}
	for _, f := range faults {
		s.Add(f)
	}
	return s
}

// Add arms another fault.
func (s *Script) Add(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &armed{Fault: f})
}

// Recover clears the crashed state and every fault: the restarted process
// runs clean.
func (s *Script) Recover() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crashed = false
	s.faults = nil
}

// Crashed reports whether a Crash fault has fired since the last Recover.
func (s *Script) Crashed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashed
}

// Calls returns a copy of the calls made so far.
func (s *Script) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Writes counts the calls that changed state (or tried to).
func (s *Script) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c.Verb.IsWrite() {
			n++
		}
	}
	return n
}

// decide matches a call against the faults and returns what to do.
func (s *Script) decide(v Verb, kind string) (latency time.Duration, crash bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crashed {
		return 0, false, ErrCrashed
	}
	for _, f := range s.faults {
		if (f.Verb != "" && f.Verb != v) || (f.Kind != "" && f.Kind != kind) {
			continue
		}
		f.seen++
		if f.Nth != 0 && f.seen != f.Nth {
			continue
		}
		if f.Err != nil && err == nil {
			err = f.Err
		}
		latency += f.Latency
		crash = crash || f.Crash
	}
	return latency, crash, err
}

func (s *Script) record(c Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

func (s *Script) crash() {
	s.mu.Lock()
	already := s.crashed
	s.crashed = true
	onCrash := s.OnCrash
	s.mu.Unlock()
	if !already && onCrash != nil {
		onCrash()
	}
}

// run wraps one call with the script.
func (s *Script) run(ctx context.Context, c client.Client, v Verb, obj runtime.Object, key client.ObjectKey, do func() error) error {
	kind := kindOf(c, obj)
	latency, crash, err := s.decide(v, kind)
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-ctx.Done():
			t.Stop()
			err = ctx.Err()
		case <-t.C:
		}
	}
	if err == nil {
		err = do()
	}
	s.record(Call{Verb: v, Kind: kind, Namespace: key.Namespace, Name: key.Name, Err: err})
	if crash && err == nil {
		s.crash()
	}
	return err
}

func kindOf(c client.Client, obj runtime.Object) string {
	if obj == nil {
		return ""
	}
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	if _, ok := obj.(client.ObjectList); ok {
		return strings.TrimSuffix(gvk.Kind, "List")
	}
	return gvk.Kind
}

// Conflict returns an apiserver Conflict error for kind/name, as an
// optimistic-concurrency failure would.
func Conflict(kind, name string) error {
	return apierrors.NewConflict(schema.GroupResource{Resource: kind}, name, errors.New("faultinject: scripted conflict"))
}

// NotFound returns an apiserver NotFound error for kind/name.
func NotFound(kind, name string) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: kind}, name)
}

// WrapClient returns c with the script applied to every call, in the manner
// of controller-runtime's client/interceptor. Use it from
// manager.Options.NewClient to fault a whole controller.
func WrapClient(c client.Client, s *Script) client.Client {
	key := client.ObjectKeyFromObject
	return interceptor.NewClient(noWatch{c}, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return s.run(ctx, c, Get, obj, k, func() error { return c.Get(ctx, k, obj, opts...) })
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return s.run(ctx, c, List, list, client.ObjectKey{}, func() error { return c.List(ctx, list, opts...) })
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return s.run(ctx, c, Create, obj, key(obj), func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return s.run(ctx, c, Update, obj, key(obj), func() error { return c.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			return s.run(ctx, c, Patch, obj, key(obj), func() error { return c.Patch(ctx, obj, p, opts...) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return s.run(ctx, c, Delete, obj, key(obj), func() error { return c.Delete(ctx, obj, opts...) })
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			return s.run(ctx, c, DeleteAllOf, obj, client.ObjectKey{Namespace: obj.GetNamespace()}, func() error { return c.DeleteAllOf(ctx, obj, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return s.run(ctx, c, subVerb(sub, StatusUpdate), obj, key(obj), func() error { return c.SubResource(sub).Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			return s.run(ctx, c, subVerb(sub, StatusPatch), obj, key(obj), func() error { return c.SubResource(sub).Patch(ctx, obj, p, opts...) })
		},
	})
}

func subVerb(sub string, status Verb) Verb {
	if sub == "status" {
		return status
	}
	return Verb(sub + "-" + string(status)[len("status-"):])
}

// noWatch lets a plain client.Client (a manager's) go through
// interceptor.NewClient, which wants a WithWatch.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("faultinject: watch is not supported through a wrapped manager client")
}

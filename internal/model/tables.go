package model

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/hold"
)

// The hold's decisions are the real package's: for each abstract input the
// model meets (the parent's and its Secret's versions, where its hold
// stands on the clock, the versions of the dependents as the reader saw
// them), the
// answer is computed once by running hold's own code on objects built for
// that input, then memoized. hold's verdict function is unexported, so the
// parent's and the Secret's answers come from hold.ParentReconciler and
// hold.SecretReconciler run against controller-runtime's fake client (a
// store with field indexes, which is all they need), and the dependent's
// from the exported Held and DependentDeadline. A change in hold changes
// the model with it.

const (
	tableNS         = "model"
	tableParent     = "parent"
	tableSecret     = "secret"
	tableCleanupFin = "model.finale.dev/cleanup"
	tableTimeout    = 10 * time.Minute
)

// tableEpoch is the parents' deletionTimestamp in the tables; whole seconds,
// as the API stores it.
var tableEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// holdTime is where a deleting parent's hold stands on the clock.
type holdTime uint8

const (
	// htUnstarted: the hold has not looked at the deletion yet (no
	// hold.Started); the clock is past the deletionTimestamp
	// plus the timeout, as after an outage longer than the hold.
	htUnstarted holdTime = iota
	// htRunning: started, within its timeout.
	htRunning
	// htOver: started, and its timeout has passed.
	htOver
)

type holdKey struct {
	P, S version
	T    holdTime
	N    uint8
	Deps [MaxDeps]version // sorted, first N used
}

// holdAnswer is what a parent reconciler pass leaves: the hold finalizer
// on the parent and on its Secret, and whether the hold has started.
type holdAnswer struct{ PFin, SFin, Started bool }

// realHold memoizes the real hold's answers.
type realHold struct {
	scheme *runtime.Scheme
	mu     sync.Mutex // guards the maps
	parent map[holdKey]holdAnswer
	secret map[holdKey]bool
	dep    map[holdKey][2]bool // Held, release without delete
}

var theHold = func() *realHold {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	return &realHold{
		scheme: s,
		parent: map[holdKey]holdAnswer{},
		secret: map[holdKey]bool{},
		dep:    map[holdKey][2]bool{},
	}
}()

func key(p, s version, t holdTime, deps []version) holdKey {
	k := holdKey{P: p, S: s, T: t, N: uint8(len(deps))}
	copy(k.Deps[:], deps)
	slices.Sort(k.Deps[:k.N])
	return k
}

// newHold is hold's Hold with its clock at now(t) and, unless t is
// htUnstarted, its first look at parent's deletion (when parent is being
// deleted) taken at the deletion: the hold keeps its start in its own
// memory, so a hold that "has started" is one that has
// looked before.
func (h *realHold) newHold(t holdTime, parent client.Object) (*hold.Hold, error) {
	clk := clocktesting.NewFakeClock(tableEpoch)
	hd, err := hold.New(hold.Config{
		Parent: &corev1.Service{}, ParentKind: "Parent",
		SecretName: func(client.Object) string { return tableSecret },
		Dependents: []hold.Dependent{{
			Kind: "Dependent", Object: &corev1.ConfigMap{}, CleanupFinalizer: tableCleanupFin,
			ParentName: func(o client.Object) string { return o.GetAnnotations()["parent"] },
		}},
		Scheme: h.scheme, Clock: clk, Timeout: tableTimeout,
	})
	if err != nil {
		return nil, err
	}
	if t != htUnstarted && parent != nil && !parent.GetDeletionTimestamp().IsZero() {
		hd.DependentDeadline(parent) // the first look, at the deletion
	}
	clk.SetTime(now(t))
	return hd, nil
}

// now is the clock for t. A hold that started did so at the deletion.
func now(t holdTime) time.Time {
	switch t {
	case htUnstarted:
		return tableEpoch.Add(2 * tableTimeout)
	case htOver:
		return tableEpoch.Add(tableTimeout + time.Second)
	}
	return tableEpoch.Add(time.Second)
}

// setMeta sets the finalizer and deletionTimestamp of o for version v.
func setMeta(o client.Object, name string, v version, fin string) {
	o.SetNamespace(tableNS)
	o.SetName(name)
	o.SetUID(types.UID("uid-" + name))
	if v.fin() {
		o.SetFinalizers([]string{fin})
	}
	if v == vDeleting {
		t := metav1.NewTime(tableEpoch)
		o.SetDeletionTimestamp(&t)
	}
}

func (h *realHold) world(k holdKey) (client.Client, *hold.Hold, error) {
	var objs []client.Object
	var parent client.Object
	if k.P.exists() {
		parent = parentAt(k.P)
		objs = append(objs, parent)
	}
	hd, err := h.newHold(k.T, parent)
	if err != nil {
		return nil, nil, err
	}
	if k.S.exists() {
		s := &corev1.Secret{}
		setMeta(s, tableSecret, k.S, hold.Finalizer)
		objs = append(objs, s)
	}
	for i, v := range k.Deps[:k.N] {
		if !v.exists() {
			continue
		}
		d := &corev1.ConfigMap{}
		setMeta(d, fmt.Sprintf("dep-%d", i), v, tableCleanupFin)
		d.SetAnnotations(map[string]string{"parent": tableParent})
		objs = append(objs, d)
	}
	b := fake.NewClientBuilder().WithScheme(h.scheme).WithObjects(objs...)
	for _, ix := range hd.Indexes() {
		b = b.WithIndex(ix.Object, ix.Field, ix.Func)
	}
	return b.Build(), hd, nil
}

// parentAt is the parent at version v.
func parentAt(v version) client.Object {
	p := &corev1.Service{}
	setMeta(p, tableParent, v, hold.Finalizer)
	return p
}

// finOf reads whether the object still carries the hold finalizer (false
// when it is gone).
func finOf(ctx context.Context, c client.Client, o client.Object, name string) (bool, error) {
	err := c.Get(ctx, client.ObjectKey{Namespace: tableNS, Name: name}, o)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.Contains(o.GetFinalizers(), hold.Finalizer), nil
}

// startedOf reads whether hd has started the hold on the parent (false
// when it is gone).
func startedOf(ctx context.Context, c client.Client, hd *hold.Hold) (bool, error) {
	p := &corev1.Service{}
	err := c.Get(ctx, client.ObjectKey{Namespace: tableNS, Name: tableParent}, p)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, ok := hd.Started(p)
	return ok, nil
}

// Parent is what hold's parent reconciler leaves on the parent and its
// Secret after one pass over this input, and whether the hold has started.
func (h *realHold) Parent(p, s version, t holdTime, deps []version) holdAnswer {
	k := key(p, s, t, deps)
	h.mu.Lock()
	a, ok := h.parent[k]
	h.mu.Unlock()
	if ok {
		return a
	}
	ctx := context.Background()
	c, hd, err := h.world(k)
	if err == nil {
		_, err = hd.ParentReconciler(c, c).Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: tableNS, Name: tableParent}})
	}
	if err == nil {
		a.PFin, err = finOf(ctx, c, &corev1.Service{}, tableParent)
	}
	if err == nil {
		a.SFin, err = finOf(ctx, c, &corev1.Secret{}, tableSecret)
	}
	if err == nil {
		a.Started, err = startedOf(ctx, c, hd)
	}
	if err != nil {
		panic(fmt.Sprintf("model: running hold's parent reconciler on %+v: %v", k, err))
	}
	h.mu.Lock()
	h.parent[k] = a
	h.mu.Unlock()
	return a
}

// Secret is whether hold's Secret reconciler leaves the hold on the Secret
// after one pass over this input (p is the one parent naming it).
func (h *realHold) Secret(p, s version, deps []version) bool {
	k := key(p, s, htRunning, deps)
	h.mu.Lock()
	a, ok := h.secret[k]
	h.mu.Unlock()
	if ok {
		return a
	}
	ctx := context.Background()
	c, hd, err := h.world(k)
	if err == nil {
		_, err = hd.SecretReconciler(c, c).Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: tableNS, Name: tableSecret}})
	}
	if err == nil {
		a, err = finOf(ctx, c, &corev1.Secret{}, tableSecret)
	}
	if err != nil {
		panic(fmt.Sprintf("model: running hold's Secret reconciler on %+v: %v", k, err))
	}
	h.mu.Lock()
	h.secret[k] = a
	h.mu.Unlock()
	return a
}

// Dependent is what a dependent's reconciler learns from the hold about a
// parent it read at version p, whose hold stands at t: Held (it may
// create) and ShouldReleaseWithoutDelete (the hold is over).
func (h *realHold) Dependent(p version, t holdTime) (held, release bool) {
	k := key(p, vNone, t, nil)
	h.mu.Lock()
	a, ok := h.dep[k]
	h.mu.Unlock()
	if ok {
		return a[0], a[1]
	}
	var parent client.Object
	if p.exists() {
		parent = parentAt(p)
	}
	hd, err := h.newHold(t, parent)
	if err != nil {
		panic(fmt.Sprintf("model: hold.New: %v", err))
	}
	a = [2]bool{hd.Held(parent), hd.ShouldReleaseWithoutDelete(parent)}
	h.mu.Lock()
	h.dep[k] = a
	h.mu.Unlock()
	return a[0], a[1]
}

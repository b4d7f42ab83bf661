package model

// version is an object's abstract state in the apiserver: whether it
// exists, whether it is being deleted, and whether it carries the one
// finalizer the model follows for its kind (the cleanup finalizer on a
// dependent, the hold on a parent and its Secret, the capture finalizer on
// a child). Every write the model makes to an object is an optimistic-lock
// patch in the real code (lifecycle, hold and capture all use
// MergeFromWithOptimisticLock), so a write planned from a stale copy of
// the object it writes conflicts and changes nothing: the model therefore
// writes an object only from its current version, and stale reads matter
// only for what a process reads about other objects.
type version uint8

const (
	vNone     version = iota // not created yet
	vAlive                   // exists, without the finalizer
	vAliveFin                // exists, with the finalizer
	vDeleting                // deletionTimestamp set, finalizer still on
	vGone                    // deleted (removed from the apiserver)
)

var versionNames = [...]string{vNone: "-", vAlive: "alive", vAliveFin: "alive+fin", vDeleting: "deleting+fin", vGone: "gone"}

func (v version) String() string { return versionNames[v] }

// exists reports that the apiserver returns the object.
func (v version) exists() bool { return v == vAlive || v == vAliveFin || v == vDeleting }

// fin reports that the object carries the followed finalizer.
func (v version) fin() bool { return v == vAliveFin || v == vDeleting }

// object is an apiserver object: its version and every version it has had,
// which is what a lagging cache can still show.
type object struct {
	V    version
	Hist uint8 // bit v: the object has been at version v
}

func newObject(v version) object { return object{V: v, Hist: 1 << v} }

func (o *object) set(v version) {
	o.V = v
	o.Hist |= 1 << v
}

// del is a delete request: an object without the finalizer goes at once,
// one with it gets its deletionTimestamp.
func (o *object) del() {
	switch o.V {
	case vAlive:
		o.set(vGone)
	case vAliveFin:
		o.set(vDeleting)
	}
}

// addFin adds the finalizer; the apiserver refuses a new finalizer on an
// object being deleted.
func (o *object) addFin() {
	if o.V == vAlive {
		o.set(vAliveFin)
	}
}

// rmFin removes the finalizer; a deleting object whose last finalizer goes
// is removed by the apiserver.
func (o *object) rmFin() {
	switch o.V {
	case vAliveFin:
		o.set(vAlive)
	case vDeleting:
		o.set(vGone)
	}
}

// views are the versions a read of o may return: with stale reads, any
// version the object has had (a lagging cache, a lagging apiserver, a
// cache rebuilt from an apiserver further behind); otherwise the current.
func (o object) views(stale bool) []version {
	if !stale || o.Hist == 1<<o.V {
		return []version{o.V}
	}
	out := make([]version, 0, 5)
	out = append(out, o.V) // the fresh read first: traces prefer it
	for v := vNone; v <= vGone; v++ {
		if v != o.V && o.Hist&(1<<v) != 0 {
			out = append(out, v)
		}
	}
	return out
}

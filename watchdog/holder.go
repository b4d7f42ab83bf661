package watchdog

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// A finalizer holder is the controller that removes some finalizer. While
// it runs it renews a coordination.k8s.io/v1 Lease that says so: labelled
// LabelFinalizerHolder "true", annotated with the finalizers it releases
// (AnnotationHeldFinalizers), its spec.renewTime renewed well within
// spec.leaseDurationSeconds. Everything the watchdog itself reports (the
// Events, the condition, the metrics) stops when that controller stops;
// the Lease is what a reader outside it (finale audit) uses to tell "a
// deletion in progress" from "a deletion nobody will ever finish": a
// deleting object that carries a finalizer whose every holder Lease has
// expired.
const (
	// LabelFinalizerHolder marks a finalizer holder's Lease; its value is
	// "true".
	LabelFinalizerHolder = "finale.dev/finalizer-holder"
	// AnnotationHeldFinalizers lists, separated by commas, the finalizers
	// the Lease's holder releases.
	AnnotationHeldFinalizers = "finale.dev/finalizers"
)

// HolderExpiry returns when lease stops vouching for its holder:
// spec.renewTime plus spec.leaseDurationSeconds. ok is false when either is
// missing or the duration is not positive: such a Lease vouches for nothing.
func HolderExpiry(lease *coordinationv1.Lease) (expiry time.Time, ok bool) {
	s := lease.Spec
	if s.RenewTime == nil || s.LeaseDurationSeconds == nil || *s.LeaseDurationSeconds <= 0 {
		return time.Time{}, false
	}
	return s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second), true
}

// HeldFinalizers returns the finalizers lease says its holder releases,
// or nil when it is not a finalizer holder's Lease.
func HeldFinalizers(lease *coordinationv1.Lease) []string {
	if lease.Labels[LabelFinalizerHolder] != "true" {
		return nil
	}
	var out []string
	for _, f := range strings.Split(lease.Annotations[AnnotationHeldFinalizers], ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

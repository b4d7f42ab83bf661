// Package widget is the tiny managed kind of lifecycle's tests and
// examples, shared by the library module's tests and the real-stack tests
// in examples/postgres/stacktest.
package widget

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Widget is the tiny managed kind of lifecycle's tests and examples: in
// the real-stack tests (examples/postgres/stacktest/lifecycle), a
// PostgreSQL role named Spec.RoleName reached through the DSN in the
// ConfigMap Spec.Parent.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec"`
	Status            WidgetStatus `json:"status,omitempty"`
}

// WidgetSpec names the parent and the role.
type WidgetSpec struct {
	Parent         string `json:"parent"`
	RoleName       string `json:"roleName"`
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
}

// WidgetStatus holds the conditions lifecycle writes.
type WidgetStatus struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (w *Widget) DeepCopyObject() runtime.Object {
	c := *w
	w.DeepCopyInto(&c.ObjectMeta)
	c.Status.Conditions = nil
	for _, cond := range w.Status.Conditions {
		c.Status.Conditions = append(c.Status.Conditions, *cond.DeepCopy())
	}
	return &c
}

// WidgetList is a list of Widgets.
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *WidgetList) DeepCopyObject() runtime.Object {
	c := &WidgetList{TypeMeta: l.TypeMeta}
	l.DeepCopyInto(&c.ListMeta)
	for i := range l.Items {
		c.Items = append(c.Items, *l.Items[i].DeepCopyObject().(*Widget))
	}
	return c
}

// GroupVersion is the Widget's API group and version.
var GroupVersion = schema.GroupVersion{Group: "lifecycle.test.finale.dev", Version: "v1"}

// AddToScheme registers Widget and WidgetList in s.
func AddToScheme(s *runtime.Scheme) {
	s.AddKnownTypes(GroupVersion, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(s, GroupVersion)
}

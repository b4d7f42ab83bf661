// Package keysoperator is an operator for API keys of a small HTTP key
// service, written as a user of finale would write one.
package keysoperator

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group of Key.
var GroupVersion = schema.GroupVersion{Group: "keys.example.com", Version: "v1"}

// Key is one API key in the key service.
type Key struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              KeySpec   `json:"spec"`
	Status            KeyStatus `json:"status,omitempty"`
}

// KeySpec names the key in the service.
type KeySpec struct {
	Name           string `json:"name"`
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
}

// KeyStatus is what lifecycle reports.
type KeyStatus struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
}

// KeyList is a list of Keys.
type KeyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Key `json:"items"`
}

// AddToScheme adds Key and KeyList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Key{}, &KeyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// DeepCopyObject is what controller-gen would generate.
func (k *Key) DeepCopyObject() runtime.Object {
	c := *k
	k.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Status.Conditions = nil
	for _, cond := range k.Status.Conditions {
		c.Status.Conditions = append(c.Status.Conditions, *cond.DeepCopy())
	}
	return &c
}

// DeepCopyObject is what controller-gen would generate.
func (l *KeyList) DeepCopyObject() runtime.Object {
	c := &KeyList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	for i := range l.Items {
		c.Items = append(c.Items, *l.Items[i].DeepCopyObject().(*Key))
	}
	return c
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletionPolicy says what happens to the key in the service when its
// APIKey is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type DeletionPolicy string

const (
	// DeletionPolicyDelete deletes the key, then lets the APIKey go.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyRetain lets the APIKey go and leaves the key (and its
	// ownership tag) in the service.
	DeletionPolicyRetain DeletionPolicy = "Retain"
)

// Condition types of an APIKey (lifecycle's).
const (
	// ConditionReady is True while the key exists as specified.
	ConditionReady = "Ready"
	// ConditionSynced is True when the last reconcile reached the service
	// and applied the spec, False with the reason when it did not.
	ConditionSynced = "Synced"
)

// KeyServerReference names a KeyServer in the same namespace. References
// across namespaces are not offered: an APIKey could otherwise use the
// token of a KeyServer its author cannot read.
type KeyServerReference struct {
	// Name of the KeyServer, in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// APIKeySpec is the key the service should hold.
type APIKeySpec struct {
	// KeyServerRef names the KeyServer the key lives in. It cannot change:
	// the key and its cleanup record belong to that service.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="keyServerRef is immutable: a key cannot move to another service; create a new APIKey there and delete this one"
	KeyServerRef KeyServerReference `json:"keyServerRef"`
	// Name is the key's display name in the service (not unique there:
	// the service names keys by the IDs it generates).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	Name string `json:"name"`
	// Scopes granted to the key, a set.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	Scopes []string `json:"scopes,omitempty"`
	// DeletionPolicy is Delete (the key is deleted with the APIKey) or
	// Retain (the key stays in the service).
	// +kubebuilder:default=Delete
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// APIKeyStatus is what lifecycle reports.
type APIKeyStatus struct {
	// Conditions: Ready, Synced.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// APIKey is an API key in the key service a KeyServer reaches.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories={finale,keys},shortName=apikey
// +kubebuilder:printcolumn:name="KeyServer",type=string,JSONPath=`.spec.keyServerRef.name`
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type APIKey struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   APIKeySpec   `json:"spec"`
	Status APIKeyStatus `json:"status,omitempty"`
}

// APIKeyList is a list of APIKeys.
// +kubebuilder:object:root=true
type APIKeyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []APIKey `json:"items"`
}

func init() {
	SchemeBuilder.Register(&APIKey{}, &APIKeyList{})
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DatabaseSpec is a PostgreSQL database.
type DatabaseSpec struct {
	// ServerRef names the Server the database lives on.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serverRef is immutable: a Database cannot move to another server; create a new Database instead"
	ServerRef ServerReference `json:"serverRef"`
	// DatabaseName is the database's name in PostgreSQL: a lowercase
	// identifier (letters, digits, underscores, $), at most 63 characters.
	// It cannot change.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z_][a-z0-9_$]*$')",message="databaseName must be a lowercase PostgreSQL identifier: start with a lowercase letter or underscore, then lowercase letters, digits, underscores or $ (for example orders)"
	// +kubebuilder:validation:XValidation:rule="!(self in ['postgres', 'template0', 'template1'])",message="databaseName must not be postgres, template0 or template1: those databases belong to the server"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="databaseName is immutable: to rename, create a new Database and move the data"
	DatabaseName string `json:"databaseName"`
	// Owner is the name of the role that owns the database; by default the
	// Server's login.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z_][a-z0-9_$]*$')",message="owner must be a lowercase PostgreSQL role name: start with a lowercase letter or underscore, then lowercase letters, digits, underscores or $"
	// +optional
	Owner string `json:"owner,omitempty"`
	// DeletionPolicy: Retain (the default) leaves the database, and its data,
	// when this object is deleted; Delete drops it.
	// +kubebuilder:default=Retain
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// DatabaseStatus is what the operator last observed of the database.
type DatabaseStatus struct {
	// Conditions: Ready, Synced.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Database is a PostgreSQL database on a Server.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories={finale,postgres},shortName=pgdb
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.serverRef.name`
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.databaseName`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.owner`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.deletionPolicy`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Database struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DatabaseSpec   `json:"spec"`
	Status DatabaseStatus `json:"status,omitempty"`
}

// DatabaseList is a list of Databases.
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Database `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Database{}, &DatabaseList{})
}

package v1alpha1

// DeletionPolicy says what happens to the PostgreSQL object when its
// Kubernetes object is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type DeletionPolicy string

const (
	// DeletionPolicyDelete drops the PostgreSQL object, then lets the
	// Kubernetes object go.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyRetain lets the Kubernetes object go and leaves the
	// PostgreSQL object (and its ownership tag) in place.
	DeletionPolicyRetain DeletionPolicy = "Retain"
)

// Condition types shared by all kinds. Their reasons belong to the
// reconcilers that set them.
const (
	// ConditionReady is True when the PostgreSQL object exists as specified.
	ConditionReady = "Ready"
	// ConditionSynced is True when the last reconcile reached the server and
	// applied the spec, False with the error's reason when it did not.
	ConditionSynced = "Synced"
)

// ServerReference names a Server in the same namespace. Cross-namespace
// references are not offered: a Role or Database could otherwise borrow the
// credentials of a Server its author cannot read.
type ServerReference struct {
	// Name of the Server, in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types. Their reasons belong to the reconciler.
const (
	// ConditionReady is True while the server-side worker deployment exists
	// and is managed by this object.
	ConditionReady = "Ready"
	// ConditionSynced is True when the last reconcile reached the server.
	ConditionSynced = "Synced"
)

// ConnectionReference names a Connection in the same namespace.
type ConnectionReference struct {
	// Name of the Connection.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// WorkerDeploymentSpec is a worker deployment on a Temporal server.
type WorkerDeploymentSpec struct {
	// ConnectionRef names the Connection to the server.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="connectionRef is immutable: the deployment on the old server would be left behind; create a new WorkerDeployment instead"
	ConnectionRef ConnectionReference `json:"connectionRef"`
	// TemporalNamespace is the Temporal namespace the deployment lives in.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1000
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="temporalNamespace is immutable: the deployment in the old namespace would be left behind; create a new WorkerDeployment instead"
	TemporalNamespace string `json:"temporalNamespace"`
	// DeploymentName is the server-side worker deployment's name, which
	// workers poll with (their deployment options' DeploymentName).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="deploymentName is immutable: the old deployment would be left behind; create a new WorkerDeployment instead"
	DeploymentName string `json:"deploymentName"`
}

// WorkerDeploymentStatus is what the operator last observed.
type WorkerDeploymentStatus struct {
	// Conditions: Ready, Synced, and the watchdog's CleanupBlocked.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// WorkerDeployment is a Temporal worker deployment the operator creates,
// claims (its manager identity) and, when the object is deleted, deletes
// with all its versions.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories={finale,temporal},shortName=twd
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deploymentName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WorkerDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkerDeploymentSpec   `json:"spec"`
	Status WorkerDeploymentStatus `json:"status,omitempty"`
}

// WorkerDeploymentList is a list of WorkerDeployments.
// +kubebuilder:object:root=true
type WorkerDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkerDeployment `json:"items"`
}

func init() {
	SchemeBuilder.Register(&WorkerDeployment{}, &WorkerDeploymentList{})
}

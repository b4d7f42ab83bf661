package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultAPIKeySecretKey is the key read from the API-key Secret when none
// is named.
const DefaultAPIKeySecretKey = "api-key"

// SecretKeySelector names a key of a Secret in the same namespace.
type SecretKeySelector struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key in the Secret's data.
	// +kubebuilder:default=api-key
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// ConnectionSpec says how to reach a Temporal frontend and with which API
// key.
type ConnectionSpec struct {
	// HostPort is the frontend's address, host:port (for example
	// my-ns.a1b2c.tmprl.cloud:7233).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:XValidation:rule="self.matches('^[^/ ]+:[0-9]{1,5}$')",message="hostPort must be host:port, without scheme or path (for example temporal.example.com:7233)"
	HostPort string `json:"hostPort"`
	// APIKeySecretRef names the Secret holding the API key. It is read on
	// every call, never captured at dial time, so a rotated key is used by
	// the next call.
	APIKeySecretRef SecretKeySelector `json:"apiKeySecretRef"`
	// Plaintext turns TLS off. An API key then travels in clear text:
	// only for a server on loopback.
	// +optional
	Plaintext bool `json:"plaintext,omitempty"`
}

// Connection is a connection to a Temporal frontend with an API key.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories={finale,temporal},shortName=tconn
// +kubebuilder:printcolumn:name="HostPort",type=string,JSONPath=`.spec.hostPort`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Connection struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ConnectionSpec `json:"spec"`
}

// ConnectionList is a list of Connections.
// +kubebuilder:object:root=true
type ConnectionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Connection `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Connection{}, &ConnectionList{})
}

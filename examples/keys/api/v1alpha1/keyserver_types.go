package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultTokenKey is the key of the bearer token in a KeyServer's Secret
// when none is named.
const DefaultTokenKey = "token"

// TokenSecretReference names the Secret, in the KeyServer's namespace,
// holding the bearer token the operator sends to the key service.
type TokenSecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key of the token in the Secret's data.
	// +kubebuilder:default=token
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// KeyServerSpec says where the key service is and how the operator
// authenticates to it.
type KeyServerSpec struct {
	// URL is the key service's base URL, http or https, without query or
	// fragment (for example http://127.0.0.1:8080).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#@]+(/[^?#]*)?$')",message="url must be an http or https URL without user, query or fragment (for example http://127.0.0.1:8080)"
	URL string `json:"url"`
	// TokenSecretRef names the Secret with the bearer token.
	TokenSecretRef TokenSecretReference `json:"tokenSecretRef"`
}

// KeyServer is a key service the operator creates APIKeys in, with the
// credentials it uses there. It has no status: nothing in the guarantees
// needs one, and the deployment a KeyServer reaches is proven on every
// cleanup, never read from an object.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories={finale,keys}
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KeyServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec KeyServerSpec `json:"spec"`
}

// KeyServerList is a list of KeyServers.
// +kubebuilder:object:root=true
type KeyServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KeyServer `json:"items"`
}

func init() {
	SchemeBuilder.Register(&KeyServer{}, &KeyServerList{})
}

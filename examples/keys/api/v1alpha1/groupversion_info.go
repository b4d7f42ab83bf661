// +kubebuilder:object:generate=true
// +groupName=keys.finale.dev

package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// Group is the API group of the key operator's kinds.
const Group = "keys.finale.dev"

var (
	// GroupVersion is the group and version of the kinds in this package.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers KeyServer and APIKey with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // kubebuilder's convention; this example's API package already depends on controller-runtime

	// AddToScheme adds the kinds in this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

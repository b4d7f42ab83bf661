// +kubebuilder:object:generate=true
// +groupName=temporal.finale.dev

package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// Group is the API group of the Temporal example's kinds.
const Group = "temporal.finale.dev"

var (
	// GroupVersion is the group and version of the kinds in this package.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers Connection and WorkerDeployment with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // kubebuilder's convention, as in examples/postgres

	// AddToScheme adds the kinds in this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Package v1alpha1 holds Brewlet's cluster-scoped API types (group node.brewlet.sh).
// The CRD manifests in config/crd are generated from these types by controller-gen
// (`make generate`); validation the API server can enforce is written here as CEL.
//
// +kubebuilder:object:generate=true
// +groupName=node.brewlet.sh
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version name this API. The package imports nothing of Brewlet's internals, so
// that clients of the API need only it; internal/vocab's Group and Version are the same
// strings (a unit test there keeps them equal).
const (
	Group   = "node.brewlet.sh"
	Version = "v1alpha1"
)

var (
	// GroupVersion is the group and version of these types.
	GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// knownTypes is filled by each type's file.
	knownTypes []runtime.Object
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

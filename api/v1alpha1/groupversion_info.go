// Package v1alpha1 holds the rackcache.io/v1alpha1 API: CachePool and
// CachedVolume, their validation markers, and the condition types and reasons
// the controllers report. Types only; behaviour lives in controllers/.
//
// +kubebuilder:object:generate=true
// +groupName=rackcache.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "rackcache.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

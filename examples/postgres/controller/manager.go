package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions are the manager cache settings the operator runs with
// (examples/postgres/cmd/operator): no object keeps its managedFields, and
// a cached Secret keeps neither its data nor its annotations (kubectl apply
// copies a Secret's data into the last-applied-configuration annotation).
// Setup's code reads Secrets through the cache as metadata only and their
// data live (the API reader), so the cache holds no Secret's data even
// without these options; with them, nothing that asks the cache for a
// typed Secret can make it hold every Secret's data either: it gets one
// without data.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Transform: stripSecret},
		},
	}
}

// ClientOptions make the manager's client read Secrets from the API server,
// never through the cache: a typed Secret read through the client is a
// live GET, not a cluster-wide informer of every Secret's data.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}

// stripSecret is the cache transform of Secrets, in whichever form the
// informer holds them (typed or metadata-only).
func stripSecret(in any) (any, error) {
	if s, ok := in.(*corev1.Secret); ok {
		s.Data, s.StringData = nil, nil
	}
	if m, err := meta.Accessor(in); err == nil {
		m.SetManagedFields(nil)
		m.SetAnnotations(nil)
	}
	return in, nil
}

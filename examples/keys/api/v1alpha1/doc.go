// Package v1alpha1 is the API of finale's second worked example, an
// operator for API keys of a small HTTP key service (package
// examples/keys/service), group keys.finale.dev: KeyServer (where the
// service is and the Secret with the operator's bearer token) and APIKey
// (a key in that service).
//
// The kubebuilder markers here are the source of the CRDs in
// examples/keys/config/crd; `make generate` regenerates those and
// zz_generated.deepcopy.go, and a test there fails when they drift.
//
// The schema refuses what cannot work before any reconcile: a KeyServer
// URL that is not http or https (or carries a user, query or fragment), a
// key without a name, scopes that are not a set of short strings, a
// deletion policy other than Delete or Retain, and a keyServerRef that
// changes (the key and its cleanup record belong to the service it was
// created in). References are to the same namespace only, so an APIKey
// uses no token its author cannot already read.
package v1alpha1

// Package crd holds the reference operator's CustomResourceDefinitions, as
// controller-gen generates them from the kubebuilder markers in
// examples/postgres/api/v1alpha1, and gives them to Go code (tests, the demo,
// the operator's installer) as typed objects.
//
// The YAML files are generated; never edit them by hand. Regenerate with
// `make generate` (the commands are in Generate's comment). The package's
// tests fail when the files drift from the types: they run the pinned
// controller-gen into a temporary directory and compare byte for byte.
//
// The schemas refuse bad specs at admission, with messages that say what to
// do: role and database names must be lowercase PostgreSQL identifiers of at
// most 63 characters (PostgreSQL silently truncates longer ones, so a longer
// name would create a different object than the one asked for), names
// PostgreSQL reserves are refused, names and server references are immutable,
// deletionPolicy is Delete or Retain, and a Role's password comes from
// exactly one source.
package crd

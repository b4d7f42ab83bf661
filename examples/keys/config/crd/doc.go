// Package crd holds the key operator's CustomResourceDefinitions (KeyServer,
// APIKey), as controller-gen generates them from the kubebuilder markers
// in examples/keys/api/v1alpha1, and gives them to Go code (tests, and a
// consumer's testenv.Options.CRDs) as typed objects; they are embedded,
// so they work from the module cache too.
//
// The YAML files are generated; never edit them by hand. Regenerate with
// `make generate`. TestGeneratedFilesUpToDate fails when the files drift
// from the types: it runs the pinned controller-gen
// (crdfiletest.ControllerGen) into a temporary directory and compares byte
// for byte.
package crd

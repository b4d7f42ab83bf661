// Package crdfile reads the CustomResourceDefinitions controller-gen
// generates for one API group from an embedded directory: what each
// example's config/crd package serves to its tests, the demo and the
// scenarios.
package crdfile

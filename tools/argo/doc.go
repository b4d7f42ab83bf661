// Package argo is the build module for the stock Argo Workflows controller
// (github.com/argoproj/argo-workflows/v4/cmd/workflow-controller at v4.1.4)
// that the G3 seed runs against. It exists so that finale's own go.mod never
// requires argo-workflows; internal/argobin builds from here.
//
// One dependency of v4.1.4, the pseudo-version of
// github.com/google/go-containerregistry/pkg/authn/k8schain, is not in the
// checksum database (it answers 404), so that one module path, and only it,
// is exempted with GONOSUMDB when this module is built; its hash is still
// pinned by go.sum here.
package argo

// Package kube133 is the build module for the Kubernetes v1.33 binaries:
// the oldest Kubernetes server finale claims to support, on which its
// compatibility tests run (make test's kube133 job). Like tools/kube it
// exists so that finale's own go.mod never requires k8s.io/kubernetes;
// internal/kubebin builds from its embedded copy.
package kube133

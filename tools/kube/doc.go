// Package kube is the build module for the Kubernetes binaries finale's local
// control plane runs. It exists so that finale's own go.mod never requires
// k8s.io/kubernetes; internal/kubebin builds from here.
package kube

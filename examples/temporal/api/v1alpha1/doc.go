// Package v1alpha1 is the API of finale's Temporal example, group
// temporal.finale.dev: Connection (a Temporal frontend, a Temporal
// namespace's API key in a Secret) and WorkerDeployment (a worker deployment
// on that server, shaped like temporal-worker-controller's, whose deletion
// cleans up the server-side deployment and its versions).
//
// The kubebuilder markers here are the source of the CRDs in
// examples/temporal/config/crd; `make generate` regenerates those and
// zz_generated.deepcopy.go, and a test there fails when they drift.
//
// # What the schema guarantees
//
//   - hostPort is host:port, without scheme or path.
//   - connectionRef and the API-key Secret are in the object's own
//     namespace, so an object can use no credentials its author cannot
//     already read.
//   - connectionRef, temporalNamespace and deploymentName are immutable: a
//     change would strand the old server-side deployment, which nothing
//     would delete any more.
package v1alpha1

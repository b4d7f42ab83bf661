// A module of finale's user, outside finale's tree, on the oldest
// controller-runtime and k8s.io finale supports (and an older Go line
// than finale's own examples). modproxy's TestConsumer copies it to a
// temporary directory, points the requirement below at the version it
// just published to a file-based GOPROXY, runs go mod tidy, checks that
// none of the pins below moved and that nothing of pgx, Temporal or Argo
// came in, then runs go test.
module example.com/keysoperator

go 1.24.0

require (
	github.com/finale-dev/finale v0.0.0-00010101000000-000000000000
	k8s.io/api v0.33.0
	k8s.io/apimachinery v0.33.0
	k8s.io/client-go v0.33.0
	sigs.k8s.io/controller-runtime v0.21.0
)

package crd

import (
	"embed"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/finale-dev/finale/internal/crdfile"
)

// Group is the API group the files define.
const Group = "temporal.finale.dev"

//go:embed temporal.finale.dev_*.yaml
var files embed.FS

// Files are the names of the generated CRD files, in lexical order.
func Files() ([]string, error) { return crdfile.Files(files, Group) }

// CRDs decodes the generated definitions: Connections, WorkerDeployments.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return crdfile.Decode(files, Group)
}

// Package argocrd reads Argo's own minimal CRDs from the argo-workflows
// module in the module cache (at argobin.Version), so the control plane
// serves exactly the kinds the controller was built against.
package argocrd

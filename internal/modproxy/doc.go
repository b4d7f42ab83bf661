// Package modproxy serves a module the way a dependency arrives: as the
// zip a module proxy would serve (golang.org/x/mod/zip, nested modules and
// ignored files left out), in a file-based GOPROXY directory that the go
// command reads through GOPROXY=file://... ahead of the real proxy.
//
// It exists to prove adoption in CI: a consumer module outside this tree
// builds against finale exactly as published, so anything a checkout has
// and the zip lacks (tools/kube, say) fails there, not at a user's.
//
// The version is a pseudo-version whose revision is a hash of the zip, so
// the module cache, which never re-extracts a version it holds, gets a new
// version for every change of content and reuses the old one otherwise.
package modproxy

// Package images is the one list of the container images finale's
// manifests pull, and how each is built from this repository without a
// container engine: the command as a static linux binary (CGO off,
// -trimpath, no build ID) in a one-layer OCI image (internal/ociimage),
// named, tagged and run as the user its Deployment says, written as an OCI
// image layout and an OCI archive. Nothing is pushed.
//
// The tag is the release, defined once: VERSION in the Makefile (v0.1.0),
// which make images passes to the builds (imagebuild -version). Build
// refuses a manifest whose tag is not that version, and the package's test
// that every image: in the repository's manifests is one of All, at that
// version, and that the Makefile has a target for each, so manifests,
// images and the version cannot drift apart:
//
//	make images                    # every image, into bin/IMAGE-image and bin/IMAGE-image.tar
//	make operator-image            # one of them
//	skopeo copy oci:bin/operator-image:v0.1.0 docker://REGISTRY/finale-postgres-operator:v0.1.0
//	ctr -n k8s.io images import bin/operator-image.tar
package images

// Package ociimage writes a container image as an OCI image layout (a
// directory with oci-layout, index.json and content-addressed blobs) and as
// an OCI archive (that directory as one tar), with the standard library
// only: finale's images (internal/images) are built where no container
// engine runs, and the layout is what registries' copy tools and
// containerd import (skopeo copy oci:DIR:TAG, ctr images import ARCHIVE,
// podman load).
//
// The image has one layer holding the given files, and its bytes depend on
// nothing but the inputs: file times, owners and the config's creation time
// are fixed, and JSON and tar are written in a fixed order, so the same
// binary gives the same digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Media types and annotations of the OCI image specification (v1.1).
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	// AnnotationRefName names the image in index.json: its tag.
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationImageName is the full reference containerd's and Docker's
	// importers name the image by.
	AnnotationImageName = "io.containerd.image.name"
	// LayoutVersion is the oci-layout file's imageLayoutVersion.
	LayoutVersion = "1.0.0"
)

// Epoch is the time every file in the layer and the image's creation carry:
// a fixed one, so that the digest depends on the content only.
var Epoch = time.Unix(0, 0).UTC()

// File is one regular file of the layer.
type File struct {
	// Path inside the image, absolute ("/guard").
	Path string
	Mode fs.FileMode
	Data []byte
}

// Image is what Write builds.
type Image struct {
	// Ref is the full reference, name and tag
	// ("ghcr.io/finale-dev/finale-argo-guard:v0.1.0").
	Ref string
	// OS and Architecture, as GOOS and GOARCH name them.
	OS, Architecture string
	Entrypoint       []string
	// User is "uid:gid".
	User  string
	Files []File
}

// Descriptor points at a blob.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform of a manifest in the index.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Index is index.json.
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Manifest is the image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Config is the image configuration (the parts this package writes).
type Config struct {
	Created      time.Time     `json:"created"`
	Architecture string        `json:"architecture"`
	OS           string        `json:"os"`
	Config       RuntimeConfig `json:"config"`
	RootFS       RootFS        `json:"rootfs"`
	History      []History     `json:"history"`
}

// RuntimeConfig is Config.config.
type RuntimeConfig struct {
	User       string   `json:"User,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

// RootFS lists the layers' uncompressed digests.
type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// History is one step of the image's making.
type History struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
}

// Tag returns the tag of a reference ("v0.1.0" of "host/name:v0.1.0"), or
// "" when it has none.
func Tag(ref string) string {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ""
	}
	return ref[i+1:]
}

func (img Image) check() error {
	switch {
	case img.Ref == "" || Tag(img.Ref) == "":
		return fmt.Errorf("ociimage: reference %q has no tag", img.Ref)
	case img.OS == "" || img.Architecture == "":
		return errors.New("ociimage: OS and Architecture are required")
	case len(img.Entrypoint) == 0:
		return errors.New("ociimage: an Entrypoint is required")
	case len(img.Files) == 0:
		return errors.New("ociimage: the layer has no files")
	}
	for _, f := range img.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return fmt.Errorf("ociimage: file path %q: want a clean absolute path to a file", f.Path)
		}
	}
	return nil
}

// Write writes img as an OCI image layout into dir (created; it must not
// exist or be empty) and returns the manifest's descriptor, as index.json
// lists it.
func Write(dir string, img Image) (Descriptor, error) {
	if err := img.check(); err != nil {
		return Descriptor{}, err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return Descriptor{}, fmt.Errorf("ociimage: %s is not empty; remove it or choose another directory", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: %w", err)
	}
	tarball, err := layerTar(img.Files)
	if err != nil {
		return Descriptor{}, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: %w", err)
	}
	if _, err := zw.Write(tarball); err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: compress layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: compress layer: %w", err)
	}
	layer, err := writeBlob(dir, MediaTypeLayer, gz.Bytes())
	if err != nil {
		return Descriptor{}, err
	}
	cfg := Config{
		Created: Epoch, Architecture: img.Architecture, OS: img.OS,
		Config:  RuntimeConfig{User: img.User, Entrypoint: img.Entrypoint, WorkingDir: "/"},
		RootFS:  RootFS{Type: "layers", DiffIDs: []string{digest(tarball)}},
		History: []History{{Created: Epoch, CreatedBy: "finale ociimage: " + strings.Join(paths(img.Files), " ")}},
	}
	cfgBlob, err := writeJSONBlob(dir, MediaTypeConfig, cfg)
	if err != nil {
		return Descriptor{}, err
	}
	m := Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Config: cfgBlob, Layers: []Descriptor{layer}}
	manifest, err := writeJSONBlob(dir, MediaTypeManifest, m)
	if err != nil {
		return Descriptor{}, err
	}
	manifest.Annotations = map[string]string{AnnotationRefName: Tag(img.Ref), AnnotationImageName: img.Ref}
	manifest.Platform = &Platform{Architecture: img.Architecture, OS: img.OS}
	idx, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{manifest}})
	if err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: %w", err)
	}
	layout := `{"imageLayoutVersion":"` + LayoutVersion + `"}`
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(layout), 0o644); err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: %w", err)
	}
	return manifest, nil
}

// layerTar is the layer's tar: each file's parent directories, then the
// file, owned by root, at Epoch.
func layerTar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		var parents []string
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: Epoch, Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, fmt.Errorf("ociimage: layer: %w", err)
			}
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: int64(f.Mode.Perm()), Size: int64(len(f.Data)), ModTime: Epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("ociimage: layer: %w", err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("ociimage: layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", err)
	}
	return buf.Bytes(), nil
}

func paths(files []File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Path
	}
	return out
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func writeBlob(dir, mediaType string, b []byte) (Descriptor, error) {
	d := digest(b)
	if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(d, "sha256:")), b, 0o644); err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: %w", err)
	}
	return Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}, nil
}

func writeJSONBlob(dir, mediaType string, v any) (Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: %w", err)
	}
	return writeBlob(dir, mediaType, b)
}

// Archive writes the layout in dir as one tar (an OCI archive), its entries
// in a fixed order at Epoch.
func Archive(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: Epoch, Format: tar.FormatPAX})
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: Epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		return fmt.Errorf("ociimage: archive %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("ociimage: archive %s: %w", dir, err)
	}
	return nil
}

// Loaded is an image read back from a layout by Load.
type Loaded struct {
	// Descriptor is the manifest's entry in index.json.
	Descriptor Descriptor
	Manifest   Manifest
	Config     Config
	// Layer is the layer's tar, uncompressed.
	Layer []byte
}

// Load reads the one image of the layout in dir, checking every blob
// against its digest and size, and the layer against its diff_id.
func Load(dir string) (Loaded, error) {
	var out Loaded
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := readJSON(filepath.Join(dir, "oci-layout"), &layout); err != nil {
		return out, err
	}
	if layout.Version != LayoutVersion {
		return out, fmt.Errorf("ociimage: %s: imageLayoutVersion %q, want %q", dir, layout.Version, LayoutVersion)
	}
	var idx Index
	if err := readJSON(filepath.Join(dir, "index.json"), &idx); err != nil {
		return out, err
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != MediaTypeManifest {
		return out, fmt.Errorf("ociimage: %s: index.json lists %d manifests, want one image manifest", dir, len(idx.Manifests))
	}
	out.Descriptor = idx.Manifests[0]
	b, err := readBlob(dir, out.Descriptor)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out.Manifest); err != nil {
		return out, fmt.Errorf("ociimage: manifest: %w", err)
	}
	if b, err = readBlob(dir, out.Manifest.Config); err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out.Config); err != nil {
		return out, fmt.Errorf("ociimage: config: %w", err)
	}
	if len(out.Manifest.Layers) != 1 || len(out.Config.RootFS.DiffIDs) != 1 {
		return out, fmt.Errorf("ociimage: %d layers and %d diff_ids, want one of each", len(out.Manifest.Layers), len(out.Config.RootFS.DiffIDs))
	}
	if b, err = readBlob(dir, out.Manifest.Layers[0]); err != nil {
		return out, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return out, fmt.Errorf("ociimage: layer: %w", err)
	}
	if out.Layer, err = io.ReadAll(zr); err != nil {
		return out, fmt.Errorf("ociimage: layer: %w", err)
	}
	if d := digest(out.Layer); d != out.Config.RootFS.DiffIDs[0] {
		return out, fmt.Errorf("ociimage: the layer's uncompressed digest is %s, its diff_id %s", d, out.Config.RootFS.DiffIDs[0])
	}
	return out, nil
}

// File returns a file of the layer by its path in the image.
func (l Loaded) File(p string) (File, error) {
	tr := tar.NewReader(bytes.NewReader(l.Layer))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return File{}, fmt.Errorf("ociimage: %s is not in the layer", p)
		}
		if err != nil {
			return File{}, fmt.Errorf("ociimage: layer: %w", err)
		}
		if "/"+hdr.Name != p || hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return File{}, fmt.Errorf("ociimage: layer: %w", err)
		}
		return File{Path: p, Mode: fs.FileMode(hdr.Mode).Perm(), Data: b}, nil
	}
}

func readJSON(p string, v any) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("ociimage: %s: %w", p, err)
	}
	return nil
}

func readBlob(dir string, d Descriptor) ([]byte, error) {
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexDigest) != sha256.Size*2 {
		return nil, fmt.Errorf("ociimage: digest %q is not sha256", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexDigest))
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	if digest(b) != d.Digest || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("ociimage: blob %s: content has digest %s and size %d, descriptor says size %d", d.Digest, digest(b), len(b), d.Size)
	}
	return b, nil
}

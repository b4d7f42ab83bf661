package kubebin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/finale-dev/finale/internal/binbuild"
)

// Where a binary came from, as logged and recorded in the cache directory.
const (
	SourceEnvtest = "envtest"
	SourceRelease = "release"
	SourceBuild   = "build"
)

// Environment variables that choose the sources.
const (
	// EnvReleaseURL moves the download of the official release binaries
	// to a mirror laid out as dl.k8s.io is
	// (<url>/release/<version>/bin/<os>/<arch>/<name> and <name>.sha256),
	// or, set to "off", turns downloads off.
	EnvReleaseURL = "FINALE_KUBE_RELEASE_URL"
	// EnvEnvtest is kubebuilder's asset directory variable: a directory
	// holding kube-apiserver, kubectl and etcd of one version.
	EnvEnvtest = "KUBEBUILDER_ASSETS"
	// DefaultReleaseURL is where Kubernetes publishes its release binaries.
	DefaultReleaseURL = "https://dl.k8s.io"
	// ReleaseURLOff, as EnvReleaseURL, turns downloads off.
	ReleaseURLOff = "off"
)

const (
	manifestFile = "sources.json"
	sourcesLock  = ".sources.lock"
	buildSubdir  = ".build"
	// The network may be unreachable (this machine's is): a connection
	// that does not open within dialTimeout is given up and the next source
	// tried, so that a first test run without a network pays seconds, not
	// minutes. A connection that opens and then stalls is given up after
	// headerTimeout for the answer, idleTimeout between reads of a body.
	dialTimeout   = 3 * time.Second
	headerTimeout = 10 * time.Second
	idleTimeout   = 30 * time.Second
	// versionTimeout bounds `<binary> --version` on an envtest binary.
	versionTimeout = 10 * time.Second
)

// ErrChecksum is a downloaded binary whose SHA-256 is not the published
// one. It is never run: Ensure fails, it does not fall back to another
// source, because a mirror serving wrong files is something its user must
// hear of (set FINALE_KUBE_RELEASE_URL=off to build from source instead).
var ErrChecksum = errors.New("kubebin: downloaded binary does not match its published SHA-256")

// errUnavailable marks a source that cannot provide a binary (no network,
// no such file): the next source is tried.
var errUnavailable = errors.New("unavailable")

// BuildFunc builds the named binaries of a release from Go modules and
// returns the directory holding them.
type BuildFunc func(ctx context.Context, names []string, log io.Writer) (string, error)

// Installer puts the binaries of one release into one directory, each from
// the first source, in this order, that has it:
//
//  1. a kubebuilder envtest asset directory (Envtest, in order) whose
//     binary reports exactly this release's version: envtest ships
//     kube-apiserver and kubectl (and etcd, see below), not
//     kube-controller-manager;
//  2. the official release binaries under ReleaseURL, each verified
//     against its published .sha256 before it is written under its
//     name; a mismatch fails Ensure (ErrChecksum);
//  3. a build from Go modules (Build).
//
// etcd always comes from the build: the binary finale runs is a small
// program on etcd's embed package whose flags the control plane uses (a
// few seconds to build), not the etcd command, and dl.k8s.io has no etcd.
// When every binary is to be built, the build goes straight into Dir, as
// it always has (its stamp makes it current); otherwise a record of each
// binary's source, size and SHA-256 (sources.json) makes Dir current.
type Installer struct {
	Release Release
	// Dir receives the binaries.
	Dir string
	// Envtest are envtest asset directories to take binaries from.
	Envtest []string
	// ReleaseURL is the base of the release binaries; empty: no download.
	ReleaseURL string
	// HTTP downloads them.
	HTTP *http.Client
	// Build builds what no other source had; NewInstaller's builds with
	// internal/binbuild into Dir (all of them) or Dir/.build (some).
	Build BuildFunc
	// Log receives progress and each binary's source.
	Log io.Writer
}

// NewInstaller returns the installer of r's binaries into dir (empty:
// r.Dir) with the sources the environment gives: $KUBEBUILDER_ASSETS and
// setup-envtest's default directory for this version, the release URL
// ($FINALE_KUBE_RELEASE_URL, default DefaultReleaseURL), the build.
func NewInstaller(r Release, dir string, log io.Writer) (*Installer, error) {
	if dir == "" {
		var err error
		if dir, err = r.Dir(); err != nil {
			return nil, fmt.Errorf("kubebin: %w", err)
		}
	}
	if log == nil {
		log = io.Discard
	}
	base, err := releaseURL(os.Getenv(EnvReleaseURL))
	if err != nil {
		return nil, err
	}
	in := &Installer{Release: r, Dir: dir, Envtest: envtestDirs(r), ReleaseURL: base, HTTP: httpClient(), Log: log}
	in.Build = in.build
	return in, nil
}

// releaseURL checks the configured base URL: unset means the official
// site, "off" none.
func releaseURL(v string) (string, error) {
	switch v {
	case "":
		return DefaultReleaseURL, nil
	case ReleaseURLOff:
		return "", nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("kubebin: %s=%q is not an http(s) URL or %q", EnvReleaseURL, v, ReleaseURLOff)
	}
	return strings.TrimRight(v, "/"), nil
}

// envtestDirs: $KUBEBUILDER_ASSETS, then the directory setup-envtest
// installs this version into by default.
func envtestDirs(r Release) []string {
	var dirs []string
	if d := os.Getenv(EnvEnvtest); d != "" {
		dirs = append(dirs, d)
	}
	data := os.Getenv("XDG_DATA_HOME")
	if data == "" {
		if home, err := os.UserHomeDir(); err == nil {
			data = filepath.Join(home, ".local", "share")
		}
	}
	if data != "" {
		dirs = append(dirs, filepath.Join(data, "kubebuilder-envtest", "k8s",
			strings.TrimPrefix(r.Kubernetes, "v")+"-"+runtime.GOOS+"-"+runtime.GOARCH))
	}
	return dirs
}

func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout}).DialContext,
		TLSHandshakeTimeout:   dialTimeout,
		ResponseHeaderTimeout: headerTimeout,
	}}
}

// manifest is sources.json: what Dir holds when not all of it was built.
type manifest struct {
	Kubernetes string `json:"kubernetes"`
	Etcd       string `json:"etcd"`
	// BuildStamp is the stamp of the build of the binaries whose source is
	// build: a change of finale's build module replaces them.
	BuildStamp string           `json:"buildStamp"`
	Binaries   []manifestBinary `json:"binaries"`
}

type manifestBinary struct {
	Name   string `json:"name"`
	Source string `json:"source"` // SourceEnvtest, SourceRelease or SourceBuild
	From   string `json:"from"`   // the directory or URL
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Ensure returns Dir once it holds every binary of the release.
func (in *Installer) Ensure(ctx context.Context) (string, error) {
	if err := os.MkdirAll(in.Dir, 0o755); err != nil {
		return "", fmt.Errorf("kubebin: %w", err)
	}
	unlock, err := binbuild.Lock(filepath.Join(in.Dir, sourcesLock))
	if err != nil {
		return "", err
	}
	defer unlock()
	full, err := in.Release.spec(in.Dir, targets)
	if err != nil {
		return "", fmt.Errorf("kubebin: %w", err)
	}
	stamp, err := full.Stamp()
	if err != nil {
		return "", fmt.Errorf("kubebin: %w", err)
	}
	if full.Current(stamp) {
		return in.Dir, nil
	}
	if in.manifestCurrent() {
		return in.Dir, nil
	}

	got := map[string]manifestBinary{}
	in.fromEnvtest(ctx, got)
	if err := in.fromRelease(ctx, got); err != nil {
		return "", err
	}
	var build []string
	for _, n := range Names() {
		if _, ok := got[n]; !ok {
			build = append(build, n)
		}
	}
	if len(build) == len(targets) {
		// Nothing elsewhere: the build goes into Dir itself.
		if err := removeIfExists(filepath.Join(in.Dir, manifestFile)); err != nil {
			return "", err
		}
		dir, err := in.Build(ctx, build, in.Log)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(in.Log, "kubebin: Kubernetes %s: every binary built from Go modules, in %s\n", in.Release.Kubernetes, dir)
		return dir, nil
	}
	// A stamp left by an earlier full build must not outlive its files.
	if err := removeIfExists(filepath.Join(in.Dir, "stamp")); err != nil {
		return "", err
	}
	if err := removeIfExists(filepath.Join(in.Dir, manifestFile)); err != nil {
		return "", err
	}
	bdir, err := in.Build(ctx, build, in.Log)
	if err != nil {
		return "", err
	}
	for _, n := range build {
		b, err := place(Path(bdir, n), in.Dir, n)
		if err != nil {
			return "", err
		}
		b.Source, b.From = SourceBuild, bdir
		got[n] = b
	}
	m := manifest{Kubernetes: in.Release.Kubernetes, Etcd: in.Release.Etcd, BuildStamp: in.buildStamp(build)}
	for _, n := range Names() {
		b := got[n]
		m.Binaries = append(m.Binaries, b)
		fmt.Fprintf(in.Log, "kubebin: %s %s: %s (%s)\n", n, in.Release.Kubernetes, b.Source, b.From)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", fmt.Errorf("kubebin: %w", err)
	}
	if err := os.WriteFile(filepath.Join(in.Dir, manifestFile), append(data, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("kubebin: %w", err)
	}
	return in.Dir, nil
}

// Sources returns the source of each binary in dir, as Ensure recorded it:
// SourceBuild for all when dir was built whole.
func Sources(dir string) (map[string]string, error) {
	out := map[string]string{}
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		for _, n := range Names() {
			out[n] = SourceBuild
		}
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubebin: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("kubebin: %s: %w", manifestFile, err)
	}
	for _, b := range m.Binaries {
		out[b.Name] = b.Source
	}
	return out, nil
}

// manifestCurrent: sources.json names this release, its built binaries
// come from this build module, and every binary is there with the size
// recorded (the digest was checked as each was written; Dir is the user's
// own, as the build's stamp is).
func (in *Installer) manifestCurrent() bool {
	b, err := os.ReadFile(filepath.Join(in.Dir, manifestFile))
	if err != nil {
		return false
	}
	var m manifest
	if json.Unmarshal(b, &m) != nil || m.Kubernetes != in.Release.Kubernetes || m.Etcd != in.Release.Etcd {
		return false
	}
	var built, names []string
	for _, b := range m.Binaries {
		names = append(names, b.Name)
		if b.Source == SourceBuild {
			built = append(built, b.Name)
		}
		fi, err := os.Stat(Path(in.Dir, b.Name))
		if err != nil || fi.Size() != b.Size || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	slices.Sort(names)
	want := Names()
	slices.Sort(want)
	return slices.Equal(names, want) && m.BuildStamp == in.buildStamp(built)
}

func (in *Installer) buildStamp(names []string) string {
	s, err := in.Release.spec(filepath.Join(in.Dir, buildSubdir), pick(names))
	if err != nil {
		return ""
	}
	st, err := s.Stamp()
	if err != nil {
		return ""
	}
	return st
}

// pick returns the targets named, in build order.
func pick(names []string) []binbuild.Target {
	var out []binbuild.Target
	for _, t := range targets {
		if slices.Contains(names, t.Name) {
			out = append(out, t)
		}
	}
	return out
}

// build is NewInstaller's BuildFunc: internal/binbuild, into Dir when it
// builds every binary, else into Dir/.build.
func (in *Installer) build(ctx context.Context, names []string, log io.Writer) (string, error) {
	dir := in.Dir
	if len(names) != len(targets) {
		dir = filepath.Join(in.Dir, buildSubdir)
	}
	s, err := in.Release.spec(dir, pick(names))
	if err != nil {
		return "", fmt.Errorf("kubebin: %w", err)
	}
	return s.Ensure(ctx, log)
}

// fromEnvtest takes from the envtest directories every binary but etcd
// that reports exactly this release's version.
func (in *Installer) fromEnvtest(ctx context.Context, got map[string]manifestBinary) {
	for _, d := range in.Envtest {
		for _, n := range []string{KubeAPIServer, KubeControllerManager, Kubectl} {
			if _, ok := got[n]; ok {
				continue
			}
			src := Path(d, n)
			if fi, err := os.Stat(src); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				continue
			}
			v, err := binaryVersion(ctx, src, n)
			if err != nil {
				fmt.Fprintf(in.Log, "kubebin: %s in %s not used: %v\n", n, d, err)
				continue
			}
			if v != in.Release.Kubernetes {
				fmt.Fprintf(in.Log, "kubebin: %s in %s is %s, not %s: not used\n", n, d, v, in.Release.Kubernetes)
				continue
			}
			b, err := place(src, in.Dir, n)
			if err != nil {
				fmt.Fprintf(in.Log, "kubebin: %s in %s not used: %v\n", n, d, err)
				continue
			}
			b.Source, b.From = SourceEnvtest, d
			got[n] = b
		}
	}
}

// binaryVersion runs a Kubernetes binary for its version: kube-apiserver
// and kube-controller-manager print "Kubernetes v1.37.2" for --version,
// kubectl "Client Version: v1.37.2" for version --client.
func binaryVersion(ctx context.Context, path, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	args := []string{"--version"}
	if name == Kubectl {
		args = []string{"version", "--client"}
	}
	out, err := exec.CommandContext(ctx, path, args...).Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if last := f[len(f)-1]; strings.HasPrefix(last, "v1.") && (strings.HasPrefix(sc.Text(), "Kubernetes ") || strings.HasPrefix(sc.Text(), "Client Version:")) {
			return last, nil
		}
	}
	return "", fmt.Errorf("%s %s printed no version", name, strings.Join(args, " "))
}

// fromRelease downloads what is still missing (but etcd). A source that
// cannot be reached ends the downloads (the next binary would wait as
// long); a digest that does not match fails.
func (in *Installer) fromRelease(ctx context.Context, got map[string]manifestBinary) error {
	if in.ReleaseURL == "" {
		return nil
	}
	for _, n := range []string{KubeAPIServer, KubeControllerManager, Kubectl} {
		if _, ok := got[n]; ok {
			continue
		}
		u := in.ReleaseURL + "/release/" + in.Release.Kubernetes + "/bin/" + runtime.GOOS + "/" + runtime.GOARCH + "/" + n
		start := time.Now()
		b, err := in.download(ctx, u, n)
		if errors.Is(err, errUnavailable) {
			fmt.Fprintf(in.Log, "kubebin: no download of the release binaries, given up after %s (%v); building what is missing from Go modules\n", time.Since(start).Round(10*time.Millisecond), err)
			return nil
		}
		if err != nil {
			return err
		}
		b.Source, b.From = SourceRelease, u
		got[n] = b
		fmt.Fprintf(in.Log, "kubebin: downloaded %s %s in %s, SHA-256 %s as published\n", n, in.Release.Kubernetes, time.Since(start).Round(100*time.Millisecond), b.SHA256)
	}
	return nil
}

// download fetches u's published digest, then u into a temporary file in
// Dir, and gives the file its name only when the digests agree.
func (in *Installer) download(ctx context.Context, u, name string) (manifestBinary, error) {
	sum, err := in.get(ctx, u+".sha256", 1<<10)
	if err != nil {
		return manifestBinary{}, err
	}
	want := strings.ToLower(firstField(string(sum)))
	if _, err := hex.DecodeString(want); err != nil || len(want) != sha256.Size*2 {
		// A captive portal answers anything with a page: no digest, so
		// nothing to verify against, so nothing downloaded.
		return manifestBinary{}, fmt.Errorf("%w: %s.sha256 holds no SHA-256", errUnavailable, u)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return manifestBinary{}, fmt.Errorf("kubebin: %w", err)
	}
	resp, err := in.HTTP.Do(req)
	if err != nil {
		return manifestBinary{}, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end or abandoned
	if resp.StatusCode != http.StatusOK {
		return manifestBinary{}, fmt.Errorf("%w: %s: %s", errUnavailable, u, resp.Status)
	}
	tmp, err := os.CreateTemp(in.Dir, "."+name+".download-*")
	if err != nil {
		return manifestBinary{}, fmt.Errorf("kubebin: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), idleReader{resp.Body, idleTimeout, resp.Body})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return manifestBinary{}, fmt.Errorf("%w: %s: %w", errUnavailable, u, err)
	}
	if gotSum := hex.EncodeToString(h.Sum(nil)); gotSum != want {
		return manifestBinary{}, fmt.Errorf("%w: %s: published %s, downloaded %s; nothing was run (set %s=%s to build from Go modules instead)",
			ErrChecksum, u, want, gotSum, EnvReleaseURL, ReleaseURLOff)
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return manifestBinary{}, fmt.Errorf("kubebin: %w", err)
	}
	if err := os.Rename(tmp.Name(), Path(in.Dir, name)); err != nil {
		return manifestBinary{}, fmt.Errorf("kubebin: %w", err)
	}
	return manifestBinary{Name: name, Size: n, SHA256: want}, nil
}

// get reads a small file (at most limit bytes).
func (in *Installer) get(ctx context.Context, u string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("kubebin: %w", err)
	}
	resp, err := in.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s: %s", errUnavailable, u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errUnavailable, u, err)
	}
	return b, nil
}

func firstField(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// idleReader fails a read of a body that stalls for longer than d: a
// connection that opened and then hangs falls back to the build instead
// of waiting forever.
type idleReader struct {
	r     io.Reader
	d     time.Duration
	close io.Closer
}

func (ir idleReader) Read(p []byte) (int, error) {
	t := time.AfterFunc(ir.d, func() { _ = ir.close.Close() })
	n, err := ir.r.Read(p)
	if !t.Stop() && err != nil {
		err = fmt.Errorf("no data for %s: %w", ir.d, err)
	}
	return n, err
}

// place puts a copy of src into dir as name and records its size and
// digest. A copy, not a link: an envtest directory the user later empties
// or upgrades must not change what the stamp-less cache holds.
func place(src, dir, name string) (manifestBinary, error) {
	f, err := os.Open(src)
	if err != nil {
		return manifestBinary{}, fmt.Errorf("kubebin: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	tmp, err := os.CreateTemp(dir, "."+name+".copy-*")
	if err != nil {
		return manifestBinary{}, fmt.Errorf("kubebin: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), f)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o755)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), Path(dir, name))
	}
	if err != nil {
		return manifestBinary{}, fmt.Errorf("kubebin: place %s: %w", name, err)
	}
	return manifestBinary{Name: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func removeIfExists(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kubebin: %w", err)
	}
	return nil
}

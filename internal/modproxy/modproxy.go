package modproxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// versionTime is the time of every pseudo-version Publish makes: the
// content hash, not the time, tells versions apart.
var versionTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Publish writes the module rooted at root into the GOPROXY directory dir
// and returns its path and version. Only what a published version would
// carry goes in: in a git work tree the tracked and unignored files, and
// never nested modules (zip.Create drops them, as the proxy does).
func Publish(dir, root string) (module.Version, error) {
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return module.Version{}, fmt.Errorf("modproxy: %w", err)
	}
	path := modfile.ModulePath(gomod)
	if path == "" {
		return module.Version{}, fmt.Errorf("modproxy: %s/go.mod has no module line", root)
	}
	files, err := listFiles(root)
	if err != nil {
		return module.Version{}, err
	}
	// The version is made from the content (the zip's file names carry the
	// version, so the zip itself cannot be what is hashed).
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f.(file).path)
		if err != nil {
			return module.Version{}, fmt.Errorf("modproxy: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f.Path(), len(b))
		h.Write(b)
	}
	mv := module.Version{Path: path, Version: module.PseudoVersion("v0", "", versionTime, hex.EncodeToString(h.Sum(nil))[:12])}
	body, err := zipOf(mv, files)
	if err != nil {
		return module.Version{}, err
	}
	esc, err := module.EscapePath(path)
	if err != nil {
		return module.Version{}, fmt.Errorf("modproxy: %w", err)
	}
	vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return module.Version{}, fmt.Errorf("modproxy: %w", err)
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{mv.Version, versionTime})
	list, err := os.ReadFile(filepath.Join(vdir, "list"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return module.Version{}, fmt.Errorf("modproxy: %w", err)
	}
	if !bytes.Contains(list, []byte(mv.Version+"\n")) {
		list = append(list, mv.Version+"\n"...)
	}
	for name, data := range map[string][]byte{
		mv.Version + ".info": info,
		mv.Version + ".mod":  gomod,
		mv.Version + ".zip":  body,
		"list":               list,
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return module.Version{}, fmt.Errorf("modproxy: %w", err)
		}
	}
	return mv, nil
}

// Env is the environment additions that make the go command fetch mv from
// dir and everything else as it would anyway: dir goes ahead of the
// configured GOPROXY (whose not-found answers fall through to the next
// entry), and the checksum database is skipped for mv's path alone, as it
// has never seen this zip.
func Env(dir string, mv module.Version) ([]string, error) {
	proxy, err := goEnv("GOPROXY")
	if err != nil {
		return nil, err
	}
	nosum, err := goEnv("GONOSUMDB")
	if err != nil {
		return nil, err
	}
	if nosum != "" {
		nosum = "," + nosum
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("modproxy: %w", err)
	}
	return []string{
		"GOPROXY=file://" + filepath.ToSlash(abs) + "," + proxy,
		"GONOSUMDB=" + mv.Path + nosum,
		"GOWORK=off",
		"GOTOOLCHAIN=local",
	}, nil
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("modproxy: go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func zipOf(mv module.Version, files []zip.File) ([]byte, error) {
	var b bytes.Buffer
	if err := zip.Create(&b, mv, files); err != nil {
		return nil, fmt.Errorf("modproxy: zip %s: %w", mv, err)
	}
	return b.Bytes(), nil
}

// listFiles lists what a published version of root would hold: git's
// tracked and untracked-but-unignored files in a work tree (a build
// output in the tree is not part of a release), else every file.
func listFiles(root string) ([]zip.File, error) {
	var names []string
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		for _, n := range strings.Split(string(out), "\x00") {
			if n != "" {
				names = append(names, n)
			}
		}
	} else {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == ".git":
				return fs.SkipDir
			case d.IsDir():
				return nil
			}
			rel, err := filepath.Rel(root, p)
			names = append(names, filepath.ToSlash(rel))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("modproxy: list %s: %w", root, err)
		}
	}
	var files []zip.File
	for _, n := range names {
		p := filepath.Join(root, filepath.FromSlash(n))
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return nil, fmt.Errorf("modproxy: %w", err)
		}
		if !fi.Mode().IsRegular() {
			continue // a published zip holds regular files only
		}
		files = append(files, file{slash: n, path: p, info: fi})
	}
	return files, nil
}

type file struct {
	slash, path string
	info        fs.FileInfo
}

func (f file) Path() string                 { return f.slash }
func (f file) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.path) }

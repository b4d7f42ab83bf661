package service

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The files of a data directory and of an identity directory.
const (
	DeploymentFile = "deployment"
	KeysFile       = "keys.json"
	IdentitiesFile = "identities.json"
)

type keysFile struct {
	Keys []Key `json:"keys"`
}

type identitiesFile struct {
	// Identities by operator key ID.
	Identities map[string]Enrollment `json:"identities"`
}

// loadDeployment reads dir's deployment ID, making one for a directory
// that holds no data yet. A directory with keys but no ID is refused: a
// new ID would make its keys another deployment's.
func loadDeployment(dir string) (string, error) {
	p := filepath.Join(dir, DeploymentFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("service: %s is empty: restore it from a backup of the data directory", p)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("service: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, KeysFile)); err == nil {
		return "", fmt.Errorf("service: %s holds keys but no %s: restore it from a backup rather than start a new deployment over old keys", dir, DeploymentFile)
	}
	id := "kd_" + randomHex(16)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("service: %w", err)
	}
	if _, err := f.WriteString(id + "\n"); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("service: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("service: %w", err)
	}
	return id, nil
}

// ReadKeys reads the keys a data directory holds, sorted by ID, without
// starting a service: an admin's listing of everything the service keeps
// (the HTTP API lists by tag only). It is safe while a service runs on
// the directory, since every change replaces the file at once. A directory
// without keys holds none.
func ReadKeys(dir string) ([]Key, error) {
	var kf keysFile
	if err := readJSON(filepath.Join(dir, KeysFile), &kf); err != nil {
		return nil, err
	}
	slices.SortFunc(kf.Keys, func(a, b Key) int { return strings.Compare(a.ID, b.ID) })
	return kf.Keys, nil
}

// readJSON decodes path into v; a missing file leaves v as it is.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("service: %s: %w", path, err)
	}
	return nil
}

// writeJSON replaces path with v, atomically: a crash leaves the old file
// or the new one, never half of one.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

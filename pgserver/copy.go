package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// Copy makes a physical copy of the running server with pg_basebackup (what
// a restored backup, a staging copy or a promoted replica is: the same
// system identifier, the same data, the same logins) and starts it as a new
// server on another free port. The copy is independent from then on; Stop
// it like any other. It has the data directory only: not the original's
// Options.Settings, and not its TLS certificate and key, which live outside
// the data directory (the copy serves no TLS).
func (s *Server) Copy(ctx context.Context) (c *Server, err error) {
	// The copy runs the original's binaries: pg_basebackup and a server
	// of the same major version, found (or installed) once by Start.
	bin := s.bin
	dir, err := os.MkdirTemp("", "finale-postgres-copy-")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	c = &Server{Host: s.Host, Password: s.Password, bin: bin, dir: dir, log: filepath.Join(dir, "postgres.log")}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	cred, err := ownDir(dir)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	backup := exec.CommandContext(ctx, filepath.Join(bin, "pg_basebackup"),
		"-D", data, "-h", s.Host, "-p", fmt.Sprint(s.Port), "-U", AdminUser, "-X", "stream", "--no-sync", "-c", "fast")
	backup.Env = append(os.Environ(), "PGPASSWORD="+s.Password)
	backup.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := backup.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgserver: pg_basebackup: %w\n%s", err, out)
	}
	if err := c.launch(ctx, bin, data, cred, nil); err != nil {
		return nil, err
	}
	return c, nil
}

package pgserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/finale-dev/finale/internal/freeport"
	"github.com/finale-dev/finale/internal/procgroup"
)

// AdminUser is the superuser initdb creates.
const AdminUser = "finale"

const (
	readyTimeout = 60 * time.Second
	stopGrace    = 10 * time.Second
	runAsUser    = "postgres"
)

// ErrNotInstalled is returned (wrapped, with what to install) when no
// PostgreSQL server binaries are found and Options.Install is not set.
var ErrNotInstalled = errors.New("pgserver: no PostgreSQL server binaries (initdb, postgres) found")

// installHint says what to install; Start never does it unless asked.
const installHint = "install Debian's postgresql package (apt-get install -y postgresql; `make postgres` in a finale checkout), " +
	"put initdb and postgres on PATH, or set Options.BinDir; Options.Install lets Start run apt-get itself, as root"

// Options tune Start. The zero value is ready to use: it finds an installed
// PostgreSQL and installs nothing.
type Options struct {
	// Log receives progress (an apt-get install). Nil discards it.
	Log io.Writer
	// BinDir holds initdb and postgres. Empty means the newest
	// /usr/lib/postgresql/N/bin (Debian's layout), else the directory of
	// initdb on PATH.
	BinDir string
	// Install lets Start install Debian's postgresql package with apt-get
	// when no server is found (as root only). Off, a missing server is
	// ErrNotInstalled: a library installs nothing unless asked.
	Install bool
	// Settings are extra server settings (-c name=value).
	Settings map[string]string
	// TLS, when set, starts the server with ssl=on and this certificate
	// and key (CA.Issue makes one). They are written outside the data
	// directory, as a server whose key must not travel with its data
	// keeps them, so a Copy (a pg_basebackup) does not carry them.
	// Clients may still connect without TLS.
	TLS *TLS
}

// Server is a running PostgreSQL.
type Server struct {
	// Host and Port are where it listens.
	Host string
	Port int
	// Password is AdminUser's password.
	Password string
	// Version is the server's version string.
	Version string

	bin  string // the server binaries' directory, for Copy
	dir  string
	log  string
	cmd  *exec.Cmd
	done chan struct{}

	once sync.Once
	err  error // Stop's result; guarded by once
}

// Start initializes and starts a fresh server.
func Start(ctx context.Context, opts Options) (s *Server, err error) {
	logw := opts.Log
	if logw == nil {
		logw = io.Discard
	}
	bin, err := binDir(ctx, logw, opts)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "finale-postgres-")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	s = &Server{Host: "127.0.0.1", bin: bin, dir: dir, log: filepath.Join(dir, "postgres.log")}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	cred, err := ownDir(dir)
	if err != nil {
		return nil, err
	}
	if s.Password, err = randomPassword(); err != nil {
		return nil, err
	}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.Password+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", data, "-U", AdminUser, "--pwfile="+pwfile, "--auth=scram-sha-256",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgserver: initdb: %w\n%s", err, out)
	}
	_ = os.Remove(pwfile)

	settings := opts.Settings
	if opts.TLS != nil {
		tlsSettings, err := writeTLS(dir, opts.TLS, cred)
		if err != nil {
			return nil, err
		}
		settings = make(map[string]string, len(opts.Settings)+len(tlsSettings))
		for k, v := range opts.Settings {
			settings[k] = v
		}
		for k, v := range tlsSettings {
			settings[k] = v
		}
	}
	if err := s.launch(ctx, bin, data, cred, settings); err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts postgres on data, on a free loopback port, and waits until
// it answers; a port taken by another process before postgres bound it
// costs another attempt on a fresh one.
func (s *Server) launch(ctx context.Context, bin, data string, cred *syscall.Credential, extra map[string]string) error {
	return freeport.Retry(nil, pickPort, 1, func(ports []int) error {
		return s.launchOn(ctx, ports[0], bin, data, cred, extra)
	})
}

// pickPort is freeport.Ports; a test makes it hand out a taken port.
var pickPort = freeport.Ports

// launchOn is one attempt of launch, on port.
func (s *Server) launchOn(ctx context.Context, port int, bin, data string, cred *syscall.Credential, extra map[string]string) error {
	s.Port = port

	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(s.Port),
		"unix_socket_directories": s.dir,
		"fsync":                   "off",
		"full_page_writes":        "off",
		"synchronous_commit":      "off",
		"max_connections":         "300",
		"log_min_messages":        "warning",
	}
	for k, v := range extra {
		settings[k] = v
	}
	args := []string{"-D", data}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	f, err := os.Create(s.log)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		_ = f.Close() // the process never started
		return fmt.Errorf("pgserver: start: %w", err)
	}
	s.done = make(chan struct{})
	go func() {
		_ = procgroup.Wait(s.cmd)
		_ = f.Close() // the log is complete once the process exits
		close(s.done)
	}()
	return s.waitReady(ctx, data)
}

// DSN is the admin connection string, database postgres.
func (s *Server) DSN() string { return s.DSNVia(s.Addr(), "postgres") }

// DSNVia is the admin connection string through addr (a proxy in front of
// the server, say) for database db.
func (s *Server) DSNVia(addr, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(AdminUser, s.Password),
		Host:     addr,
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// PID is the postmaster's process ID.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Dir is the server's temporary directory.
func (s *Server) Dir() string { return s.dir }

// Stop shuts the server down (fast shutdown, then SIGKILL) and removes its
// directory. Safe to call more than once.
func (s *Server) Stop() error {
	s.once.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			// SIGINT is PostgreSQL's fast shutdown: it ends sessions.
			_ = s.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-s.done:
			case <-time.After(stopGrace):
				procgroup.Kill(s.cmd.Process.Pid, s.done)
				<-s.done
			}
		}
		if err := os.RemoveAll(s.dir); err != nil {
			s.err = fmt.Errorf("pgserver: remove %s: %w", s.dir, err)
		}
	})
	return s.err
}

// waitReady polls with psql (from the server's own directory, else PATH),
// logging in as AdminUser, until the server answers a query. psql, not a
// Go driver, so that pgserver and every module that imports it (testenv)
// do not require one. psql runs only once the data directory's
// postmaster.pid says the server may accept connections: each try before
// then only fails, and a process start costs about 0.1 CPU-s on a loaded
// machine (acct measured 927 psql runs, 1.45 CPU-minutes, in one make test).
func (s *Server) waitReady(ctx context.Context, data string) error {
	psql := filepath.Join(s.bin, "psql")
	if _, err := os.Stat(psql); err != nil {
		if psql, err = lookPath("psql"); err != nil {
			return fmt.Errorf("pgserver: no psql in %s or on PATH (Debian: apt-get install postgresql-client): %w", s.bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastErr := errors.New("postmaster.pid does not say ready yet")
	for {
		if pidFileReady(filepath.Join(data, "postmaster.pid"), s.cmd.Process.Pid) {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			q := exec.CommandContext(cctx, psql, "-X", "-A", "-t", "-w", "-h", s.Host, "-p", strconv.Itoa(s.Port),
				"-U", AdminUser, "-d", "postgres", "-c", "SHOW server_version")
			q.Env = append(os.Environ(), "PGPASSWORD="+s.Password, "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=2")
			out, err := q.CombinedOutput()
			ccancel()
			if err == nil {
				s.Version = strings.TrimSpace(string(out))
				return nil
			}
			lastErr = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		select {
		case <-s.done:
			log := tail(s.log)
			if freeport.Taken(log) {
				return fmt.Errorf("pgserver: postgres exited before it was ready (%w); log:\n%s", freeport.ErrTaken, log)
			}
			return fmt.Errorf("pgserver: postgres exited before it was ready; log:\n%s", log)
		case <-ctx.Done():
			return fmt.Errorf("pgserver: not ready within %s: %w; log:\n%s", readyTimeout, lastErr, tail(s.log))
		case <-tick.C:
		}
	}
}

// pidFileReady reports whether the postmaster.pid at path belongs to pid and
// lets the server be asked with psql. The file's eighth line is the
// postmaster's status since PostgreSQL 10: "starting" and "stopping" say no
// connection will be accepted; "ready" and "standby", or a file without the
// line, leave it to psql. A file of another pid is stale and says nothing.
func pidFileReady(path string, pid int) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if strings.TrimSpace(lines[0]) != strconv.Itoa(pid) {
		return false
	}
	if len(lines) < 8 {
		return true
	}
	status := strings.TrimSpace(lines[7])
	return status != "starting" && status != "stopping"
}

// Where binDir looks; variables so that tests can point them at nothing.
var (
	debianBinGlob = "/usr/lib/postgresql/*/bin/postgres"
	geteuid       = os.Geteuid
	lookPath      = exec.LookPath
)

// binDir finds the server binaries: opts.BinDir, else Debian's newest
// /usr/lib/postgresql/N/bin, else initdb's directory on PATH; it installs
// Debian's package first only when opts.Install says so.
func binDir(ctx context.Context, log io.Writer, opts Options) (string, error) {
	if opts.BinDir != "" {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(opts.BinDir, name)); err != nil || fi.Mode()&0o111 == 0 {
				return "", fmt.Errorf("%w in Options.BinDir %s (no executable %s); %s", ErrNotInstalled, opts.BinDir, name, installHint)
			}
		}
		return opts.BinDir, nil
	}
	if d := findBinDir(); d != "" {
		return d, nil
	}
	if !opts.Install {
		return "", fmt.Errorf("%w under /usr/lib/postgresql or on PATH; %s", ErrNotInstalled, installHint)
	}
	if geteuid() != 0 {
		return "", fmt.Errorf("%w, and Options.Install needs root for apt-get; run: sudo apt-get install -y postgresql", ErrNotInstalled)
	}
	fmt.Fprintln(log, "pgserver: PostgreSQL not found and Options.Install set; running apt-get update && apt-get install -y postgresql")
	for _, args := range [][]string{{"update"}, {"install", "-y", "--no-install-recommends", "postgresql"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("pgserver: apt-get %s: %w", strings.Join(args, " "), err)
		}
	}
	if d := findBinDir(); d != "" {
		return d, nil
	}
	return "", errors.New("pgserver: apt-get installed postgresql but no /usr/lib/postgresql/N/bin/postgres appeared")
}

func findBinDir() string {
	matches, _ := filepath.Glob(debianBinGlob)
	best, bestV := "", -1
	for _, m := range matches {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(m))))
		if err == nil && v > bestV {
			best, bestV = filepath.Dir(m), v
		}
	}
	if best != "" {
		return best
	}
	initdb, err := lookPath("initdb")
	if err != nil {
		return ""
	}
	dir := filepath.Dir(initdb)
	if _, err := os.Stat(filepath.Join(dir, "postgres")); err != nil {
		return ""
	}
	return dir
}

// ownDir gives dir to the user postgres runs as and returns that user's
// credential (nil: ourselves).
func ownDir(dir string) (*syscall.Credential, error) {
	cred, err := credential()
	if err != nil || cred == nil {
		return cred, err
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	return cred, nil
}

// credential is the postgres user's when running as root, else nil (run as
// ourselves).
func credential() (*syscall.Credential, error) {
	if geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(runAsUser)
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root needs the %q user (Debian's postgresql package creates it): %w", runAsUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func randomPassword() (string, error) {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pgserver: %w", err)
	}
	return fmt.Sprintf("%x", b), nil
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

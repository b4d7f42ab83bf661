package pgserver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// noPostgres makes the machine look as if PostgreSQL were not installed,
// with an apt-get on PATH that only records how it was called.
func noPostgres(t *testing.T, euid int) (calls func() []string) {
	t.Helper()
	bin := t.TempDir()
	log := filepath.Join(t.TempDir(), "apt-get.log")
	script := "#!/bin/sh\necho \"$@\" >> " + log + "\n"
	if err := os.WriteFile(filepath.Join(bin, "apt-get"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	glob, euidWas := debianBinGlob, geteuid
	debianBinGlob = filepath.Join(t.TempDir(), "*", "bin", "postgres")
	geteuid = func() int { return euid }
	t.Cleanup(func() { debianBinGlob, geteuid = glob, euidWas })
	return func() []string {
		b, err := os.ReadFile(log)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
}

func TestMissingPostgreSQLInstallsOnlyWhenAsked(t *testing.T) {
	for name, tc := range map[string]struct {
		opts      Options
		euid      int
		notFound  bool // errors.Is ErrNotInstalled
		errSays   string
		wantCalls []string
	}{
		"default: an error saying what to install, nothing run": {
			euid: 0, notFound: true, errSays: "apt-get install -y postgresql",
		},
		"install asked, not root: an error, nothing run": {
			opts: Options{Install: true}, euid: 1000, notFound: true, errSays: "sudo apt-get install -y postgresql",
		},
		"install asked, as root: apt-get runs": {
			opts: Options{Install: true}, euid: 0, errSays: "no /usr/lib/postgresql/N/bin/postgres appeared",
			wantCalls: []string{"update", "install -y --no-install-recommends postgresql"},
		},
		"a BinDir without the binaries: an error, nothing run": {
			opts: Options{BinDir: os.TempDir(), Install: true}, euid: 0, notFound: true, errSays: "Options.BinDir",
		},
	} {
		t.Run(name, func(t *testing.T) {
			calls := noPostgres(t, tc.euid)
			s, err := Start(t.Context(), tc.opts)
			if err == nil {
				_ = s.Stop()
				t.Fatal("Start succeeded without PostgreSQL")
			}
			if got := errors.Is(err, ErrNotInstalled); got != tc.notFound {
				t.Errorf("errors.Is(%v, ErrNotInstalled) = %v, want %v", err, got, tc.notFound)
			}
			if !strings.Contains(err.Error(), tc.errSays) {
				t.Errorf("error %q does not say %q", err, tc.errSays)
			}
			if diff := cmp.Diff(tc.wantCalls, calls()); diff != "" {
				t.Errorf("apt-get calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServerFoundOnPath(t *testing.T) {
	noPostgres(t, 0)
	bin := os.Getenv("PATH")
	for _, name := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := findBinDir(); got != bin {
		t.Fatalf("findBinDir() = %q, want %q (initdb's directory on PATH)", got, bin)
	}
}

package temporalbin

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/finale-dev/finale/internal/binbuild"
)

// ServerVersion is the pinned go.temporal.io/server (tools/temporal's
// go.mod says the same). Changing tools/temporal changes the stamp and
// forces a rebuild; changing this constant changes the cache directory too.
const ServerVersion = "v1.32.1"

// Binary is the server's file name in the directory Ensure returns.
const Binary = "temporal-server"

// EnvDir names the environment variable that overrides the cache directory.
const EnvDir = "FINALE_TEMPORAL_BIN_DIR"

const (
	moduleDir  = "tools/temporal"
	modulePath = "github.com/finale-dev/finale/tools/temporal"
)

// Dir returns the directory that holds, or will hold, the binary.
func Dir() (string, error) {
	return binbuild.CacheDir(EnvDir, "temporal-"+ServerVersion)
}

// Path returns the full path of the binary in dir.
func Path(dir string) string { return binbuild.Path(dir, Binary) }

func spec() (binbuild.Spec, error) {
	dir, err := Dir()
	if err != nil {
		return binbuild.Spec{}, err
	}
	src, err := binbuild.FindModule(moduleDir, modulePath)
	if err != nil {
		return binbuild.Spec{}, err
	}
	return binbuild.Spec{
		Prefix: "temporalbin", What: "the Temporal server " + ServerVersion + " (temporaltest, SQLite in memory)",
		Dir: dir, Source: os.DirFS(src),
		Targets: []binbuild.Target{{Name: Binary, Package: "./cmd/temporal-server"}},
		LDFlags: "-s -w",
		Cold:    "about 9 minutes on 2 cores",
	}, nil
}

// Ensure returns the directory holding an up-to-date binary, building it
// first when it is missing or was built from a different tools/temporal.
// Progress goes to log (nil discards it).
func Ensure(ctx context.Context, log io.Writer) (string, error) {
	s, err := spec()
	if err != nil {
		return "", fmt.Errorf("temporalbin: %w", err)
	}
	return s.Ensure(ctx, log)
}

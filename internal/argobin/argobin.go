package argobin

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/finale-dev/finale/internal/binbuild"
)

// Pinned version. Changing tools/argo changes the stamp and forces a
// rebuild; changing this constant changes the cache directory as well.
const (
	Version = "v4.1.4"
	// Module is the Go module the controller is built from.
	Module = "github.com/argoproj/argo-workflows/v4"
	// GitCommit is the commit the v4.1.4 tag names (the module proxy's
	// Origin.Hash), stamped into the binary's version.
	GitCommit = "b5b4d665e9be9b87c115f943584c3e0ae96fe073"
)

// WorkflowController is the binary's name in the directory Ensure returns.
const WorkflowController = "workflow-controller"

// EnvDir names the environment variable that overrides the cache directory.
const EnvDir = "FINALE_ARGO_BIN_DIR"

// NoSumDB is the one module path exempted from checksum-database
// verification: the database has no entry for the pseudo-version v4.1.4
// requires (404). Nothing else is exempted.
const NoSumDB = "github.com/google/go-containerregistry/pkg/authn/k8schain"

const (
	moduleDir  = "tools/argo"
	modulePath = "github.com/finale-dev/finale/tools/argo"
)

var targets = []binbuild.Target{
	{Name: WorkflowController, Package: Module + "/cmd/workflow-controller"},
}

// Dir returns the directory that holds, or will hold, the binary.
func Dir() (string, error) {
	return binbuild.CacheDir(EnvDir, "argo-"+Version)
}

// Path returns the full path of one binary in dir.
func Path(dir, name string) string { return binbuild.Path(dir, name) }

func spec() (binbuild.Spec, error) {
	dir, err := Dir()
	if err != nil {
		return binbuild.Spec{}, err
	}
	src, err := findModule()
	if err != nil {
		return binbuild.Spec{}, err
	}
	return binbuild.Spec{
		Prefix: "argobin", What: "Argo Workflows " + Version + " workflow-controller",
		Dir: dir, Source: os.DirFS(src), Targets: targets, LDFlags: ldflags(),
		Env:  []string{"GONOSUMDB=" + NoSumDB},
		Cold: "about 7 minutes on 2 cores",
	}, nil
}

func findModule() (string, error) { return binbuild.FindModule(moduleDir, modulePath) }

// Ensure returns the directory holding an up-to-date workflow-controller,
// building it first when it is missing or was built from a different
// tools/argo. Progress goes to log (nil discards it).
func Ensure(ctx context.Context, log io.Writer) (string, error) {
	s, err := spec()
	if err != nil {
		return "", fmt.Errorf("argobin: %w", err)
	}
	return s.Ensure(ctx, log)
}

func ldflags() string {
	p := Module
	return fmt.Sprintf("-s -w -X %s.version=%s -X %s.gitTag=%s -X %s.gitCommit=%s -X %s.gitTreeState=clean -X %s.buildDate=1970-01-01T00:00:00Z",
		p, Version, p, Version, p, GitCommit, p, p)
}

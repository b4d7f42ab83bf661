package binbuild

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The install commands run first on a cold machine (make kube, make
// temporal, make argo, and a user's go run of kubeinstall), before the
// build cache holds anything of the module, so whatever they import is
// compiled before the servers' builds can start. They import the standard
// library, golang.org/x/tools/txtar, golang.org/x/sys/unix (procgroup's,
// for the temporal server's process group) and the build packages only: when
// kubeinstall imported controlplane it compiled client-go and
// controller-runtime first (about 700 packages, 5 CPU-minutes).
func TestInstallersImportOnlyTheBuild(t *testing.T) {
	const finale = "github.com/finale-dev/finale/"
	build := []string{"golang.org/x/tools/txtar", finale + "internal/binbuild"}
	for cmd, own := range map[string][]string{
		"controlplane/kubeinstall":             {finale + "internal/kubebin"},
		"internal/temporalbin/temporalinstall": {"golang.org/x/sys/unix", finale + "internal/procgroup", finale + "internal/temporalbin"},
		"internal/argobin/argoinstall":         {finale + "internal/argobin"},
	} {
		t.Run(cmd, func(t *testing.T) {
			c := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./"+cmd)
			c.Dir = "../.."
			// The packages are in the module cache already (this test's own
			// build needed the module's go.sum); nothing is fetched.
			c.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=")
			out, err := c.CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps ./%s: %v\n%s", cmd, err, out)
			}
			want := append(append(append([]string{}, build...), own...), finale+cmd)
			got := strings.Fields(string(out))
			slices.Sort(want)
			slices.Sort(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s imports (-want +got):\n%s", cmd, diff)
			}
		})
	}
}

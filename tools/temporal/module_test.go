package temporal

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestServerNeedsNoNewerGo guards the one fact this module rests on: the
// pinned go.temporal.io/server must build with the machine's Go toolchain
// (GOTOOLCHAIN=local). v1.32.2 needs Go 1.26.10, for example; bumping to it
// on Go 1.26.8 would otherwise fail only after minutes of building.
func TestServerNeedsNoNewerGo(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-json", "go.temporal.io/server").Output()
	if err != nil {
		t.Fatalf("go list -m go.temporal.io/server: %v", err)
	}
	var mod struct{ Version, GoMod string }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	upstream, err := os.ReadFile(mod.GoMod)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(upstream)
	if m == nil {
		t.Fatalf("no go directive in %s", mod.GoMod)
	}
	need, have := string(m[1]), strings.TrimPrefix(runtime.Version(), "go")
	if newer(need, have) {
		t.Fatalf("go.temporal.io/server %s needs Go %s, the toolchain is %s: pin a server version whose go.mod says at most %s", mod.Version, need, have, have)
	}
}

// newer reports whether dotted version a is newer than b.
func newer(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int
		if i < len(pa) {
			x = atoi(pa[i])
		}
		if i < len(pb) {
			y = atoi(pb[i])
		}
		if x != y {
			return x > y
		}
	}
	return false
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			break
		}
		n = n*10 + int(r-'0')
	}
	return n
}

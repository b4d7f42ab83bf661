package controller_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestAdapterSizesInReadme keeps the adapter sizes examples/postgres/README.md
// states true.
func TestAdapterSizesInReadme(t *testing.T) {
	readme, err := os.ReadFile("../README.md") // examples/postgres/README.md
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	for file, name := range map[string]string{"role.go": "examples/postgres/controller/role.go", "database.go": "database.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimRight(string(src), "\n"), "\n")
		code := 0
		for _, l := range lines {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
				code++
			}
		}
		want := fmt.Sprintf("`%s`, %d lines (%d of code)", name, len(lines), code)
		if !strings.Contains(text, want) {
			t.Errorf("examples/postgres/README.md does not say %q", want)
		}
	}
}

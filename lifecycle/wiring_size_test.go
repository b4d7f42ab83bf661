package lifecycle_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"
)

// Goals for wiring one kind with every guarantee.
const (
	maxWiringLines       = 15
	maxWiringIdentifiers = 12
)

// wiringSize measures the README's wiring snippet (Example_wiring's body
// between the markers): its code lines (neither blank nor only a comment)
// and the distinct exported identifiers its code touches (types, functions,
// fields and methods, the adopter's own included; comments excluded).
func wiringSize(t *testing.T) (lines int, idents []string) {
	t.Helper()
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body := between(string(src), "// README:begin\n", "\t\t// README:end")
	if body == "" {
		t.Fatal("README markers not found in readme_test.go")
	}
	for _, l := range strings.Split(body, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
			lines++
		}
	}
	f, err := parser.ParseFile(token.NewFileSet(), "snippet.go", "package p\n\nfunc _() error {\n"+body+"\n}\n", 0)
	if err != nil {
		t.Fatalf("the snippet does not parse as a function body: %v", err)
	}
	seen := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.IsExported() && !seen[id.Name] {
			seen[id.Name] = true
			idents = append(idents, id.Name)
		}
		return true
	})
	slices.Sort(idents)
	return lines, idents
}

// TestWiringSize holds the wiring of a kind to the goal (at most 15 lines
// touching at most 12 exported identifiers; by hand it took 44 and 41) and
// the figure README.md and doc.go state to the code.
func TestWiringSize(t *testing.T) {
	lines, idents := wiringSize(t)
	t.Logf("wiring: %d lines of code, %d exported identifiers %v", lines, len(idents), idents)
	if lines > maxWiringLines {
		t.Errorf("wiring one kind takes %d lines of code; the goal is at most %d", lines, maxWiringLines)
	}
	if len(idents) > maxWiringIdentifiers {
		t.Errorf("wiring one kind touches %d exported identifiers %v; the goal is at most %d", len(idents), idents, maxWiringIdentifiers)
	}
	claim := fmt.Sprintf("%d lines of code touching %d exported identifiers", lines, len(idents))
	for _, file := range []string{"doc.go", "../README.md"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Comment markers and line breaks are not part of the sentence.
		text := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "\n//", "\n")), " ")
		if !strings.Contains(text, claim) {
			t.Errorf("%s does not state the wiring's size as %q", file, claim)
		}
	}
}

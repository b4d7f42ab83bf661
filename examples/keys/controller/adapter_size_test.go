package controller_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// adapterLines counts the code lines of the adapter's methods in
// adapter.go: every line from a method's func to its closing brace that
// is neither blank nor only a comment.
func adapterLines(t *testing.T) (methods []string, lines int) {
	t.Helper()
	src, err := os.ReadFile("adapter.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "adapter.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Split(string(src), "\n")
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil {
			continue
		}
		if id, ok := fn.Recv.List[0].Type.(*ast.Ident); !ok || id.Name != "adapter" {
			continue
		}
		methods = append(methods, fn.Name.Name)
		for _, l := range all[fset.Position(fn.Pos()).Line-1 : fset.Position(fn.End()).Line] {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
				lines++
			}
		}
	}
	return methods, lines
}

// TestAdapterSize holds the adapter to the goal (at most 30 lines of code)
// and the figure README.md and doc.go state to the code, so neither can
// drift.
func TestAdapterSize(t *testing.T) {
	methods, n := adapterLines(t)
	t.Logf("adapter: %d lines of code in %d methods %v", n, len(methods), methods)
	if n > 30 {
		t.Errorf("the adapter has %d lines of code; the goal for a kind like a key is at most 30", n)
	}
	claim := fmt.Sprintf("%d lines of code", n)
	for _, file := range []string{"doc.go", "../README.md", "../../../README.md"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Comment markers and line breaks are not part of the sentence.
		text := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "\n//", "\n")), " ")
		if !strings.Contains(text, claim) {
			t.Errorf("%s does not state the adapter's size as %q", file, claim)
		}
	}
}

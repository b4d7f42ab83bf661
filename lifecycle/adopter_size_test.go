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

// The adopter's view of the package: how many exported package-level
// identifiers (constants, variables, functions, types) go doc lists. Raise
// the bound only for something an adopter calls, implements, sets or must
// recognise (a condition type, an Event or condition reason, an annotation
// a user or admin writes, a documented default); message texts, metric
// collectors, label values and wire-format constants that only finale
// itself uses stay unexported. The last three are the reasons of a create
// in doubt and of duplicate resources, which an admin acts on.
const (
	maxExported      = 66
	maxExportedConst = 40
)

// exported lists the exported package-level identifiers of the package in
// dir (test files excluded), each as "kind Name".
func exported(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, dir+"/"+name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					out = append(out, "func "+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							out = append(out, "type "+s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								out = append(out, d.Tok.String()+" "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestExportedAPISize keeps lifecycle's exported API at what an adopter
// needs: a constant that only finale uses must not become API again.
func TestExportedAPISize(t *testing.T) {
	ids := exported(t, ".")
	consts := 0
	for _, id := range ids {
		if strings.HasPrefix(id, "const ") {
			consts++
		}
	}
	t.Logf("lifecycle exports %d identifiers, %d of them constants", len(ids), consts)
	if len(ids) > maxExported || consts > maxExportedConst {
		t.Errorf("lifecycle exports %d identifiers (at most %d), %d constants (at most %d): unexport what only finale uses, or raise the bound for what an adopter needs:\n%s",
			len(ids), maxExported, consts, maxExportedConst, strings.Join(ids, "\n"))
	}
	// Message texts and metric collectors are finale's own: an adopter
	// matches on reasons and metric names, never on a message.
	for _, id := range ids {
		name := id[strings.IndexByte(id, ' ')+1:]
		for _, prefix := range []string{"Message", "Outcome", "Action"} {
			if strings.HasPrefix(name, prefix) {
				t.Errorf("%s is exported; messages, metric label values and Event actions are finale's own", id)
			}
		}
	}
}

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

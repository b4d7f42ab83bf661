package brownfield_test

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite adoption.diff from the two builds")

// Bounds of the adoption, in Go lines: what an existing operator edits
// (lines added, lines removed in files it keeps), and the files it drops.
// They are the measured figures: a change that grows the adoption must
// say so here and in docs/adopting.md.
const (
	maxAdded   = 24
	maxRemoved = 37
)

var wantDropped = []string{"clientpool.go"}

const (
	diffFile   = "adoption.diff"
	readmePath = "../../../docs/adopting.md"
	// readmeFigure is how docs/adopting.md states the size; %d: added, removed.
	readmeFigure = "+%d/−%d Go lines"
	// readmeDropped is how it states a dropped file: its name and lines.
	readmeDropped = "(`%s`, %d lines)"
)

// TestAdoptionDiff keeps adoption.diff equal to the difference between
// the naive and the adopted build (their Go files but doc.go), bounds its
// size, and checks that docs/adopting.md shows it with its size.
func TestAdoptionDiff(t *testing.T) {
	d, err := diffDirs("naive", "adopted")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(diffFile, []byte(d.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed, err := os.ReadFile(diffFile)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(committed), d.text); diff != "" {
		t.Errorf("%s is not the builds' difference (go test ./brownfield/ -run TestAdoptionDiff -update rewrites it) (-committed +builds):\n%s", diffFile, diff)
	}
	t.Logf("adoption: +%d/−%d Go lines in the files kept; dropped: %v", d.added, d.removed, d.dropped)
	if d.added > maxAdded || d.removed > maxRemoved {
		t.Errorf("the adoption adds %d and removes %d lines, want at most %d and %d", d.added, d.removed, maxAdded, maxRemoved)
	}
	if diff := cmp.Diff(wantDropped, d.dropped); diff != "" {
		t.Errorf("files the adoption drops (-want +got):\n%s", diff)
	}
	if len(d.created) != 0 {
		t.Errorf("the adoption creates files %v, want none", d.created)
	}

	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{"```diff\n" + d.kept + "```\n", fmt.Sprintf(readmeFigure, d.added, d.removed)}
	for _, n := range d.dropped {
		wants = append(wants, fmt.Sprintf(readmeDropped, n, d.droppedLines[n]))
	}
	for _, want := range wants {
		if !strings.Contains(string(readme), want) {
			t.Errorf("docs/adopting.md (\"The lease, on a real controller\") does not contain, verbatim:\n%s", want)
		}
	}
}

// dirDiff is a unified diff of two directories' Go files.
type dirDiff struct {
	text string // every file
	kept string // the files both builds have
	// added and removed count the lines of the kept files.
	added, removed   int
	dropped, created []string
	droppedLines     map[string]int // lines of each dropped file
}

// diffDirs diffs the Go files of a and b, test files and doc.go aside.
func diffDirs(a, b string) (dirDiff, error) {
	d := dirDiff{droppedLines: map[string]int{}}
	names := map[string]bool{}
	for _, dir := range []string{a, b} {
		m, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			return d, err
		}
		for _, p := range m {
			if n := filepath.Base(p); n != "doc.go" && !strings.HasSuffix(n, "_test.go") {
				names[n] = true
			}
		}
	}
	var text, kept strings.Builder
	for _, n := range slices.Sorted(maps.Keys(names)) {
		la, okA, err := readLines(filepath.Join(a, n))
		if err != nil {
			return d, err
		}
		lb, okB, err := readLines(filepath.Join(b, n))
		if err != nil {
			return d, err
		}
		from, to := a+"/"+n, b+"/"+n
		switch {
		case !okB:
			to = "/dev/null"
			d.dropped = append(d.dropped, n)
			d.droppedLines[n] = len(la)
		case !okA:
			from = "/dev/null"
			d.created = append(d.created, n)
		}
		u, plus, minus := unified(from, to, la, lb)
		text.WriteString(u)
		if okA && okB {
			kept.WriteString(u)
			d.added += plus
			d.removed += minus
		}
	}
	d.text, d.kept = text.String(), kept.String()
	return d, nil
}

// readLines reads a file's lines; a missing file reports false.
func readLines(path string) ([]string, bool, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines, true, nil
}

// op is one line of an edit script: ' ' kept, '-' removed, '+' added.
type op struct {
	kind byte
	line string
}

// script is a shortest edit script from a to b, by longest common
// subsequence (the files are a few hundred lines: a table is enough).
// Removals come before additions where both are possible.
func script(a, b []string) []op {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var s []op
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			s = append(s, op{' ', a[i]})
			i, j = i+1, j+1
		case j == len(b) || (i < len(a) && lcs[i+1][j] >= lcs[i][j+1]):
			s = append(s, op{'-', a[i]})
			i++
		default:
			s = append(s, op{'+', b[j]})
			j++
		}
	}
	return s
}

// contextLines is how many unchanged lines surround a change in a hunk.
const contextLines = 3

// unified is the unified diff of a and b (empty when equal), and how many
// lines it adds and removes.
func unified(from, to string, a, b []string) (string, int, int) {
	s := script(a, b)
	var changes []int
	for k, o := range s {
		if o.kind != ' ' {
			changes = append(changes, k)
		}
	}
	if len(changes) == 0 {
		return "", 0, 0
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", from, to)
	plus, minus := 0, 0
	for h := 0; h < len(changes); {
		// A hunk runs from contextLines before its first change to
		// contextLines after its last, taking in every change whose
		// context would touch it.
		last := h
		for last+1 < len(changes) && changes[last+1]-changes[last] <= 2*contextLines+1 {
			last++
		}
		start, end := max(changes[h]-contextLines, 0), min(changes[last]+contextLines+1, len(s))
		// Line numbers (1-based) of the hunk's first line in a and in b.
		ai, bi := 1, 1
		for _, o := range s[:start] {
			if o.kind != '+' {
				ai++
			}
			if o.kind != '-' {
				bi++
			}
		}
		na, nb := 0, 0
		var body strings.Builder
		for _, o := range s[start:end] {
			switch o.kind {
			case '-':
				na++
				minus++
			case '+':
				nb++
				plus++
			default:
				na++
				nb++
			}
			body.WriteByte(o.kind)
			body.WriteString(o.line)
			if !strings.HasSuffix(o.line, "\n") {
				body.WriteString("\n\\ No newline at end of file\n")
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n%s", span(ai, na), span(bi, nb), body.String())
		h = last + 1
	}
	return out.String(), plus, minus
}

// span is a hunk's range: an empty one names the line before it.
func span(first, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", first-1)
	}
	return fmt.Sprintf("%d,%d", first, n)
}

package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/finale-dev/finale/faultinject"
)

// statements counts the operator's PostgreSQL round trips by statement,
// through the pool's statement hook: what a lifecycle costs the service,
// counted rather than guessed.
type statements struct {
	mu sync.Mutex // guards n
	n  map[string]int
}

// hear is the pool's Statements hook.
func (s *statements) hear(_ context.Context, sql string, _ error) {
	k := label(sql)
	s.mu.Lock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[k]++
	s.mu.Unlock()
}

func (s *statements) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.n)
}

// since is what was counted after before.
func (s *statements) since(before map[string]int) map[string]int {
	d := s.snapshot()
	for k, v := range before {
		d[k] -= v
	}
	return d
}

// label is a statement's first words, up to its first quoted name: enough
// to tell the proofs, lookups, creates and drops apart.
func label(sql string) string {
	if i := strings.IndexAny(sql, `"'`); i > 0 {
		sql = sql[:i]
	}
	f := strings.Fields(sql)
	s := strings.Join(f[:min(len(f), 6)], " ")
	if len(s) > 48 {
		s = s[:48]
	}
	return s
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// perRole prints counts divided by n, largest first.
func perRole(m map[string]int, n int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return m[b] - m[a] })
	var parts []string
	for _, k := range keys {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%q %.2f", k, float64(m[k])/float64(n)))
		}
	}
	return strings.Join(parts, ", ")
}

// callCounts counts the operator client's calls by verb and kind.
func callCounts(calls []faultinject.Call) map[string]int {
	m := map[string]int{}
	for _, c := range calls {
		m[string(c.Verb)+" "+c.Kind]++
	}
	return m
}

// lifecycleReads counts the reads of Role lifecycles the operator's client
// made (Gets and Lists), whatever their kind.
func lifecycleReads(calls []faultinject.Call) int {
	n := 0
	for _, c := range calls {
		if !c.Verb.IsWrite() {
			n++
		}
	}
	return n
}

package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
)

// countingStore counts the calls that reach the real store, so a test can
// say how many API reads and writes a ledger operation cost.
type countingStore struct {
	ledger.Store
	gets, puts atomic.Int32
}

func (s *countingStore) Get(ctx context.Context, uid types.UID) (*ledger.Record, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, uid)
}

func (s *countingStore) Put(ctx context.Context, r *ledger.Record) error {
	s.puts.Add(1)
	return s.Store.Put(ctx, r)
}

type calls struct{ Gets, Puts int32 }

func (s *countingStore) reset() { s.gets.Store(0); s.puts.Store(0) }

func (s *countingStore) calls() calls { return calls{Gets: s.gets.Load(), Puts: s.puts.Load()} }

// TestCreateDeclared proves the predeclared-ID path: the record holds the
// declared ID before the create, a create returning it costs no further
// write (and no read), a create returning another ID still gets it
// recorded, a retry over an existing record rewrites the attempt time in
// the write-ahead write, and a record changed during the
// create is read again instead of overwritten.
func TestCreateDeclared(t *testing.T) {
	e := newEnv(t)
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	cases := map[string]struct {
		// existing, when set, is created first (through Create, without
		// declaring) and the clock moves on a minute.
		existing bool
		// restarted: the existing record was written by another ledger
		// (an operator process before a restart), so none is remembered.
		restarted bool
		// returns is what the create returns instead of the declared name.
		returns string
		// during runs inside the create, after the record check.
		during      func(t *testing.T, l *ledger.Ledger, owner ledger.Owner)
		wantIDs     func(declared, returned string) []string
		wantCalls   calls
		wantAttempt time.Duration // after t0
	}{
		"create returns the declared ID": {
			wantIDs:   func(d, _ string) []string { return []string{d} },
			wantCalls: calls{Gets: 0, Puts: 1},
		},
		"create returns another ID": {
			returns:   "other",
			wantIDs:   func(d, r string) []string { return []string{d, r} },
			wantCalls: calls{Gets: 0, Puts: 2},
		},
		"record exists: the attempt time is rewritten before the create": {
			existing: true,
			wantIDs:  func(d, _ string) []string { return []string{d} },
			// The ledger remembers the record it wrote: one write, no read.
			wantCalls:   calls{Gets: 0, Puts: 1},
			wantAttempt: time.Minute,
		},
		"record exists, written before a restart": {
			existing: true, restarted: true,
			wantIDs: func(d, _ string) []string { return []string{d} },
			// The guessed create meets AlreadyExists, then read and update.
			wantCalls:   calls{Gets: 1, Puts: 2},
			wantAttempt: time.Minute,
		},
		"record changed during the create is read, not overwritten": {
			returns: "other",
			during: func(t *testing.T, l *ledger.Ledger, owner ledger.Owner) {
				if _, err := l.Observe(t.Context(), owner.UID, tg, []string{"concurrent"}, time.Time{}); err != nil {
					t.Error(err)
				}
			},
			wantIDs: func(d, r string) []string { return []string{d, "concurrent", r} },
			// Observe: one read and one write; then the conflicting write
			// from the known version, a read and the write that lands.
			wantCalls: calls{Gets: 2, Puts: 4},
		},
	}
	i := 0
	for name, tc := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			store := &countingStore{Store: e.store}
			clk := e.clock
			l := e.ledger(t, store)
			owner := ownerIn(t, e.c, e.users, "declared-"+string(rune('a'+i)))
			start := clk.Now()
			if tc.existing {
				first := l
				if tc.restarted {
					first = e.ledger(t, store)
				}
				if _, err := first.Create(t.Context(), e.plan(owner), tg, func(context.Context, string) ([]string, error) {
					return nil, errors.New("the first attempt failed")
				}); err == nil {
					t.Fatal("first attempt did not fail")
				}
				clk.Step(time.Minute)
			}
			declared := pgtarget.RandomName("ledger_decl_")
			returned := declared
			if tc.returns != "" {
				returned = pgtarget.RandomName("ledger_" + tc.returns + "_")
			}
			store.reset()
			var before *ledger.Record
			rec, err := l.Create(t.Context(), ledger.Plan{Owner: owner, Declared: []string{declared}}, tg, func(ctx context.Context, tag string) ([]string, error) {
				r, err := e.store.Get(ctx, owner.UID) // the uncounted store
				if err != nil {
					return nil, err
				}
				before = r
				if tc.during != nil {
					tc.during(t, e.ledger(t, e.store), owner)
				}
				return []string{returned}, tg.CreateRole(ctx, returned, tag)
			})
			if err != nil {
				t.Fatal(err)
			}
			if before == nil || !containsAll(before.ExternalIDs, declared) {
				t.Errorf("record at create time = %+v, want it to hold the declared ID %s", before, declared)
			}
			if tc.during != nil {
				store.puts.Add(1) // Observe's own write went to the
				store.gets.Add(1) // uncounted store; count it here
			}
			if diff := cmp.Diff(tc.wantCalls, store.calls()); diff != "" {
				t.Errorf("store calls (-want +got):\n%s", diff)
			}
			got, err := e.store.Get(t.Context(), owner.UID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantIDs(declared, returned), got.ExternalIDs); diff != "" {
				t.Errorf("stored IDs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(got.ExternalIDs, rec.ExternalIDs); diff != "" {
				t.Errorf("returned record's IDs differ from the stored ones (-stored +returned):\n%s", diff)
			}
			if want := start.Add(tc.wantAttempt); !got.LastCreateAttempt.Equal(want) {
				t.Errorf("LastCreateAttempt = %v, want %v", got.LastCreateAttempt, want)
			}
			if got.Version != rec.Version {
				t.Errorf("returned version %s, stored %s", rec.Version, got.Version)
			}
		})
	}
}

// TestCreateDeclaredRefusesEmptyIDs: no record, no create, and an error.
func TestCreateDeclaredRefusesEmptyIDs(t *testing.T) {
	e := newEnv(t)
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	owner := ownerIn(t, e.c, e.users, "declared-empty")
	for name, declared := range map[string][]string{"empty ID": {""}, "one empty of two": {"a", ""}} {
		t.Run(name, func(t *testing.T) {
			var created atomic.Int32
			_, err := e.l.Create(t.Context(), ledger.Plan{Owner: owner, Declared: declared}, tg, createRole(tg, "never", &created))
			if err == nil {
				t.Fatal("CreateDeclared accepted no usable ID")
			}
			if created.Load() != 0 {
				t.Error("create called")
			}
			if _, err := e.store.Get(t.Context(), owner.UID); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("record after a refused call: %v, want ErrNotFound", err)
			}
		})
	}
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

// TestRememberedRecord proves the ledger's memory of its own writes: a
// cleanup right after the create reads nothing, and a remembered copy
// that went stale (another writer added an ID the tag cannot find) costs a
// conflict and a fresh read, never the added ID.
func TestRememberedRecord(t *testing.T) {
	e := newEnv(t)
	tg, _ := pgtarget.Fresh(t, testenv.Postgres(t))
	for _, stale := range []bool{false, true} {
		store := &countingStore{Store: e.store}
		l := e.ledger(t, store)
		owner := ownerIn(t, e.c, e.users, fmt.Sprintf("remembered-%v", stale))
		role := pgtarget.RandomName("ledger_mem_")
		if _, err := l.Create(t.Context(), e.plan(owner), tg, func(ctx context.Context, tag string) ([]string, error) {
			return []string{role}, tg.CreateRole(ctx, role, tag)
		}); err != nil {
			t.Fatal(err)
		}
		second := pgtarget.RandomName("ledger_second_")
		if stale {
			// Another writer (a second ledger: another process) records a
			// second resource, so the remembered copy is stale.
			rec, err := e.l.Get(t.Context(), owner.UID)
			if err != nil {
				t.Fatal(err)
			}
			if err := tg.CreateRole(t.Context(), second, rec.Tag); err != nil {
				t.Fatal(err)
			}
			if _, err := e.ledger(t, e.store).Observe(t.Context(), owner.UID, tg, []string{second}, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		store.reset()
		res, err := l.Cleanup(t.Context(), owner.UID, tg)
		if err != nil {
			t.Fatal(err)
		}
		wantGets := int32(0)
		if stale {
			wantGets = 1
		}
		if got := store.calls().Gets; got != wantGets || !res.Removed {
			t.Errorf("stale=%v: cleanup read the store %d times (want %d), removed %v", stale, got, wantGets, res.Removed)
		}
		for _, r := range []string{role, second} {
			if ok, err := tg.RoleExists(t.Context(), r); err != nil || ok {
				t.Errorf("stale=%v: role %s still exists (err %v)", stale, r, err)
			}
		}
		if _, err := e.store.Get(t.Context(), owner.UID); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("stale=%v: record still stored (err %v)", stale, err)
		}
	}
}

package catalog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/ledger"
)

// TestProveComputesTheResponseInside proves that the SQL computes exactly
// ledger.Respond, that enrolment happens only when asked, that the tagged
// names are part of the answer, and that a wrong key cannot verify it.
func TestProveComputesTheResponseInside(t *testing.T) {
	db := unique("proof_")
	admin := connect(t, "postgres")
	if _, err := admin.Exec(t.Context(), "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	c := connect(t, db)
	s := catalog.Sentinel{Table: "finale_sentinel_test", Deployment: catalog.SystemIdentifier, Tagged: catalog.TaggedRoles}
	key := ledger.GenerateKey()
	q := ledger.Question{KeyID: key.ID(), Challenge: "00ff", Tag: "finale:role:proof-" + db}

	if _, err := catalog.Prove(t.Context(), c, s, q); !errors.Is(err, catalog.ErrNoSentinel) {
		t.Fatalf("Prove before enrolment = %v, want ErrNoSentinel", err)
	}
	enrolled := q
	enrolled.Enroll = &ledger.Enrollment{Salt: "salt-1", Token: key.Token("salt-1")}
	roles := []string{unique("proof_b_"), unique("proof_a_")}
	for _, r := range roles {
		if _, err := c.Exec(t.Context(), "CREATE ROLE "+r+" NOLOGIN"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(t.Context(), "COMMENT ON ROLE "+r+" IS '"+q.Tag+"'"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(t.Context(), "DROP ROLE IF EXISTS "+r) })
	}
	a, err := catalog.Prove(t.Context(), c, s, enrolled)
	if err != nil {
		t.Fatal(err)
	}
	id, err := catalog.Identity(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Answer{Deployment: id, Salt: "salt-1", Tagged: []string{roles[1], roles[0]}}
	want.Response = ledger.Respond(key.Token("salt-1"), q, id, "salt-1", want.Tagged)
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}

	// A second enrolment keeps the first sentinel; a question without a tag
	// lists nothing; another key's question finds no sentinel.
	again := q
	again.Tag = ""
	again.Enroll = &ledger.Enrollment{Salt: "salt-2", Token: key.Token("salt-2")}
	a, err = catalog.Prove(t.Context(), c, s, again)
	if err != nil {
		t.Fatal(err)
	}
	if a.Salt != "salt-1" || len(a.Tagged) != 0 || a.Response != ledger.Respond(key.Token("salt-1"), again, id, "salt-1", nil) {
		t.Errorf("second answer %+v: want the first sentinel, no names, and a matching response", a)
	}
	other := ledger.GenerateKey()
	if _, err := catalog.Prove(t.Context(), c, s, ledger.Question{KeyID: other.ID(), Challenge: "01"}); !errors.Is(err, catalog.ErrNoSentinel) {
		t.Errorf("another key's question = %v, want ErrNoSentinel", err)
	}
}

// statementCounter counts what a Querier is sent.
type statementCounter struct {
	catalog.Querier
	n int
}

func (c *statementCounter) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n++
	return c.Querier.Exec(ctx, sql, args...)
}

func (c *statementCounter) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n++
	return c.Querier.QueryRow(ctx, sql, args...)
}

func (c *statementCounter) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n++
	return c.Querier.Query(ctx, sql, args...)
}

// TestProveEnrolsOnlyWithoutSentinel: a question that may enrol costs one
// statement once the database holds the key's sentinel (every create asks
// one), and enrols (table, sentinel, then the proof) only where there is
// none.
func TestProveEnrolsOnlyWithoutSentinel(t *testing.T) {
	db := unique("proof_")
	admin := connect(t, "postgres")
	if _, err := admin.Exec(t.Context(), "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	c := &statementCounter{Querier: connect(t, db)}
	s := catalog.Sentinel{Table: "finale_sentinel_test", Deployment: catalog.SystemIdentifier, Tagged: catalog.TaggedRoles}
	key := ledger.GenerateKey()
	for i, want := range []struct {
		statements int
		salt       string
	}{{4, "salt-0"}, {1, "salt-0"}} { // first: proof, table, sentinel, proof
		q := ledger.Question{KeyID: key.ID(), Challenge: "00ff", Tag: "finale:role:x"}
		salt := "salt-" + string(rune('0'+i))
		q.Enroll = &ledger.Enrollment{Salt: salt, Token: key.Token(salt)}
		c.n = 0
		a, err := catalog.Prove(t.Context(), c, s, q)
		if err != nil {
			t.Fatal(err)
		}
		if c.n != want.statements || a.Salt != want.salt {
			t.Errorf("question %d: %d statements, salt %q; want %d, %q", i, c.n, a.Salt, want.statements, want.salt)
		}
		if a.Response != ledger.Respond(key.Token(want.salt), q, a.Deployment, want.salt, nil) {
			t.Errorf("question %d: the response does not verify with the stored sentinel", i)
		}
	}
}

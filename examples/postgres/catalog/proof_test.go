package catalog_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

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

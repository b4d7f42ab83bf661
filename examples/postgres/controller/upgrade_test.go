package controller_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/controller"
	"github.com/finale-dev/finale/examples/postgres/pgtarget"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/pgserver"
	"github.com/finale-dev/finale/sweep"
)

// previousRelease is what the release before records v2 left in a cluster
// and in PostgreSQL: its sentinel (one random token per database, in the
// table finale_deployment_sentinel), roles tagged with their owner's tag,
// and one record per Role as its ConfigMapStore wrote it
// (testdata/record-v1.json: schema 1, unsigned, the deployment proven by a
// commitment to the token, IDs "<name>@<tag>").
type previousRelease struct {
	w          *world
	pg         *pgserver.Server
	deployment string
	proof      string
}

func leftByThePreviousRelease(w *world, pg *pgserver.Server) *previousRelease {
	w.t.Helper()
	conn, err := pgx.Connect(w.t.Context(), pg.DSN())
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(w.t.Context()))
	p := &previousRelease{w: w, pg: pg}
	if err := conn.QueryRow(w.t.Context(), `SELECT system_identifier::text FROM pg_control_system()`).Scan(&p.deployment); err != nil {
		w.t.Fatal(err)
	}
	token := rand.Text()
	if _, err := conn.Exec(w.t.Context(), `CREATE TABLE finale_deployment_sentinel (
		singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), token text NOT NULL)`); err != nil {
		w.t.Fatal(err)
	}
	if _, err := conn.Exec(w.t.Context(), `INSERT INTO finale_deployment_sentinel (token) VALUES ($1)`, token); err != nil {
		w.t.Fatal(err)
	}
	h := sha256.New()
	h.Write([]byte("finale-deployment-proof/v1\x00" + p.deployment + "\x00" + token))
	p.proof = hex.EncodeToString(h.Sum(nil))
	return p
}

// role creates, as the previous release did, the PostgreSQL role of a Role
// with uid (namespace/name) and its record.
func (p *previousRelease) role(ns, name string, uid types.UID, roleName string) {
	p.w.t.Helper()
	tag := "finale:role:" + string(uid)
	execOn(p.w.t, p.pg, `CREATE ROLE "`+roleName+`" NOLOGIN`)
	execOn(p.w.t, p.pg, `COMMENT ON ROLE "`+roleName+`" IS '`+tag+`'`)
	b, err := os.ReadFile("testdata/record-v1.json")
	if err != nil {
		p.w.t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(p.deployment))
	vars := map[string]string{
		"UID": string(uid), "RECORDS": p.w.recNS, "NAMESPACE": ns, "NAME": name, "ROLE": roleName,
		"DEPLOYMENT": p.deployment, "DEPLOYMENT_LABEL": "d-" + hex.EncodeToString(sum[:])[:40], "PROOF": p.proof,
		"CREATED": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano),
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal([]byte(os.Expand(string(b), func(k string) string { return vars[k] })), &cm); err != nil {
		p.w.t.Fatal(err)
	}
	p.w.create(&cm)
}

// The upgrade from the previous release's records. Before, every one of
// them was invalid to the new operator: a Role deleted after the upgrade
// sat in CleanupRecordInvalid until an admin deleted records by hand. Now
// a live owner's reconcile migrates its record (its own connection proves
// the deployment, the deployment says what carries the owner's tag, the
// object vouches for the owner) and its deletion drops the role; a record
// whose owner is gone stays invalid, reported, and is never acted on: it
// is unsigned, and nothing vouches for it.
func TestUpgradeFromThePreviousReleasesRecords(t *testing.T) {
	pg := ownServer(t)
	w := start(t, sweepFast)
	w.stop()
	ns := w.namespace()
	w.serverOn(ns, "pg", pg, pg.Addr(), v1alpha1.SSLModeDisable)
	prev := leftByThePreviousRelease(w, pg)

	// A Role the previous release created and whose deletion came just
	// before the upgrade, one that lives on, and one whose owner is gone.
	deleting := role(ns, "deleting", pgtarget.RandomName("v1_deleting_"))
	live := role(ns, "live", pgtarget.RandomName("v1_live_"))
	for _, r := range []*v1alpha1.Role{deleting, live} {
		r.Finalizers = []string{controller.Finalizer}
		w.create(r)
		prev.role(ns, r.Name, r.UID, r.Spec.RoleName)
	}
	if err := w.c.Delete(t.Context(), deleting); err != nil {
		t.Fatal(err)
	}
	orphan, orphanRole := types.UID("0c0ffee0-0000-4000-8000-000000000001"), pgtarget.RandomName("v1_orphan_")
	prev.role(ns, "orphan", orphan, orphanRole)

	w2 := w.restart(sweepFast)
	err := controlplane.WaitFor(t.Context(), wait, "the Role deleted across the upgrade to go", func(ctx context.Context) (bool, error) {
		err := w.c.Get(ctx, client.ObjectKeyFromObject(deleting), deleting)
		if c := meta.FindStatusCondition(deleting.Status.Conditions, "Synced"); err == nil && c != nil && c.Reason == "CleanupRecordInvalid" {
			return false, errors.New("the Role reads CleanupRecordInvalid: " + c.Message)
		}
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	if roleOn(t, pg, deleting.Spec.RoleName) {
		t.Error("the deleted Role's role survived")
	}
	if w2.record(string(deleting.UID)) != nil {
		t.Error("the deleted Role's record stays")
	}

	// The live Role's record is migrated: signed, the role's plain name as
	// its ID, its Server named.
	w2.ready(live)
	var rec *ledger.Record
	err = controlplane.WaitFor(t.Context(), wait, "the live Role's record migrated", func(ctx context.Context) (bool, error) {
		var err error
		rec, err = w2.op.Ledger.Get(ctx, live.UID)
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Schema != ledger.SchemaVersion || len(rec.ExternalIDs) != 1 || rec.ExternalIDs[0] != live.Spec.RoleName || rec.Via == nil || rec.Via.Name != "pg" {
		t.Errorf("migrated record: schema %d, IDs %q, connection %v; want the current schema, [%s], Server pg", rec.Schema, rec.ExternalIDs, rec.Via, live.Spec.RoleName)
	}
	if err := w.c.Delete(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	w2.waitGone(live)
	if roleOn(t, pg, live.Spec.RoleName) || w2.record(string(live.UID)) != nil {
		t.Error("the migrated Role's role or record survived its deletion")
	}

	// The orphan's record: reported as the previous release's, nothing
	// done.
	notes := w2.recordEvents(sweep.ReasonInvalid, []string{string(orphan)})
	if !strings.Contains(strings.Join(notes, "\n"), "previous release") {
		t.Errorf("invalid-record events %q do not say the record is the previous release's", notes)
	}
	if !roleOn(t, pg, orphanRole) {
		t.Error("the sweeper acted on an unsigned record: the orphan's role is gone")
	}
	var cm corev1.ConfigMap
	if err := w.c.Get(t.Context(), client.ObjectKey{Namespace: w.recNS, Name: ledger.ConfigMapName(orphan)}, &cm); err != nil {
		t.Errorf("the orphan's record: %v; want it kept, for an admin", err)
	}
}

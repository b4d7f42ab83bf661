package controller_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/examples/postgres/config/crd"
	"github.com/finale-dev/finale/internal/testenv"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/pgserver"
)

var (
	fuzzOnce  sync.Once
	fuzzC     client.Client
	fuzzAdmin *pgx.Conn
	fuzzNS    string
	fuzzErr   error
)

// fuzzStack is the control plane (CRDs installed), an admin PostgreSQL
// session and a namespace, shared by every input of the name fuzzers.
func fuzzStack(t *testing.T) (client.Client, *pgx.Conn, string) {
	t.Helper()
	fuzzOnce.Do(func() {
		// Said to every later input if this one ends before the stack is
		// up (testenv fails the test from inside): none may run on a half
		// set-up stack.
		fuzzErr = errors.New("the shared control plane and PostgreSQL did not start; see the first input's failure")
		c := testenv.Client(t, scheme())
		crds, err := crd.CRDs()
		if err == nil {
			err = controlplane.InstallCRDs(context.Background(), c, crds...)
		}
		if err != nil {
			fuzzErr = err
			return
		}
		pg := testenv.Postgres(t)
		if fuzzAdmin, fuzzErr = pgx.Connect(context.Background(), pg.DSN()); fuzzErr != nil {
			return
		}
		fuzzC, fuzzNS, fuzzErr = c, testenv.Namespace(t, c), nil
	})
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzC, fuzzAdmin, fuzzNS
}

// accepted asks the real API server (a server-side dry run: OpenAPI and CEL
// validation, nothing stored) whether the CRD accepts obj.
func accepted(t *testing.T, c client.Client, obj client.Object) bool {
	t.Helper()
	err := c.Create(t.Context(), obj, client.DryRunAll)
	switch {
	case err == nil:
		return true
	case apierrors.IsInvalid(err):
		return false
	}
	t.Fatalf("dry-run create %T: %v", obj, err)
	return false
}

var nameSeeds = []string{
	"app", "_x", "a$b", "orders_2024", strings.Repeat("a", 63), strings.Repeat("a", 64),
	"Upper", "with space", "quote\"d", "it's", `back\slash`, "semi;colon", "Robert'); DROP ROLE x;--",
	"pg_reserved", "public", "none", "current_user", "postgres", "template1", "select", "user", "é", "a\x00b", "",
}

// Every roleName the Role CRD accepts is quoted safely: CREATE ROLE makes
// exactly that role, found again by its name and its tag, and DROP ROLE
// removes it. A name the CRD accepts that PostgreSQL would refuse or
// change (reserved, truncated) fails the test: the CRD must refuse it.
func FuzzRoleNamesTheCRDAcceptsRoundTrip(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		c, admin, ns := fuzzStack(t)
		r := &v1alpha1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fuzz"},
			Spec:       v1alpha1.RoleSpec{ServerRef: v1alpha1.ServerReference{Name: "pg"}, RoleName: name},
		}
		if !accepted(t, c, r) {
			return
		}
		ctx := t.Context()
		if _, exists, err := catalog.ObserveRole(ctx, admin, name); err != nil || exists {
			// Someone else's role (postgres, say): found by name, and the
			// operator refuses it as NotOwned, which other tests prove.
			if err != nil {
				t.Fatalf("observe role %q: %v", name, err)
			}
			return
		}
		tag := ledger.TagPrefix + "role:fuzz-" + rand.String(8)
		if err := catalog.CreateRole(ctx, admin, catalog.RoleSpec{Name: name, ConnectionLimit: -1}, tag); err != nil {
			t.Fatalf("the CRD accepts roleName %q but CREATE ROLE fails: %v", name, err)
		}
		got, ok, err := catalog.ObserveRole(ctx, admin, name)
		if err != nil || !ok || got.Tag != tag {
			t.Fatalf("role %q after create: %+v exists %v err %v", name, got, ok, err)
		}
		ids, err := catalog.FindRolesByTag(ctx, admin, tag)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{name}, ids); diff != "" {
			t.Fatalf("roles tagged %q (-want +got):\n%s", tag, diff)
		}
		if err := catalog.DropRole(ctx, admin, name, tag); err != nil {
			t.Fatalf("drop role %q: %v", name, err)
		}
		if _, ok, err := catalog.ObserveRole(ctx, admin, name); err != nil || ok {
			t.Fatalf("role %q still there after drop (err %v)", name, err)
		}
	})
}

// Every databaseName the Database CRD accepts is quoted safely: CREATE
// DATABASE makes exactly that database, found again by name and tag, and
// DROP DATABASE removes it.
func FuzzDatabaseNamesTheCRDAcceptsRoundTrip(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		c, admin, ns := fuzzStack(t)
		d := &v1alpha1.Database{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fuzz"},
			Spec:       v1alpha1.DatabaseSpec{ServerRef: v1alpha1.ServerReference{Name: "pg"}, DatabaseName: name, Owner: pgserver.AdminUser},
		}
		if !accepted(t, c, d) {
			return
		}
		ctx := t.Context()
		if _, exists, err := catalog.ObserveDatabase(ctx, admin, name); err != nil || exists {
			if err != nil {
				t.Fatalf("observe database %q: %v", name, err)
			}
			return
		}
		tag := ledger.TagPrefix + "database:fuzz-" + rand.String(8)
		if err := catalog.CreateDatabase(ctx, admin, catalog.DatabaseSpec{Name: name, Owner: pgserver.AdminUser}, tag); err != nil {
			t.Fatalf("the CRD accepts databaseName %q but CREATE DATABASE fails: %v", name, err)
		}
		got, ok, err := catalog.ObserveDatabase(ctx, admin, name)
		if err != nil || !ok || got.Tag != tag {
			t.Fatalf("database %q after create: %+v exists %v err %v", name, got, ok, err)
		}
		ids, err := catalog.FindDatabasesByTag(ctx, admin, tag)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{name}, ids); diff != "" {
			t.Fatalf("databases tagged %q (-want +got):\n%s", tag, diff)
		}
		if err := catalog.DropDatabase(ctx, admin, name, tag); err != nil {
			t.Fatalf("drop database %q: %v", name, err)
		}
		if _, ok, err := catalog.ObserveDatabase(ctx, admin, name); err != nil || ok {
			t.Fatalf("database %q still there after drop (err %v)", name, err)
		}
	})
}

package scenarios

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/ledger"
)

// Invariant names one guarantee a scenario checks at its end.
type Invariant string

// The invariants.
const (
	// NoLeak: every role and database in PostgreSQL that the operator may
	// have created (carrying a finale ownership tag, or under a name only
	// the operator uses: a database's pending name) has a live owner object
	// or a cleanup record.
	NoLeak Invariant = "no-leak"
	// Finished: once faults healed, every deletion completes within a bound.
	Finished Invariant = "finished"
	// NoLostResult: a child's result reached its owner before the child went.
	NoLostResult Invariant = "no-lost-result"
	// NoWrongDelete: nothing without a matching tag was dropped.
	NoWrongDelete Invariant = "no-wrong-delete"
)

// Violation is one broken invariant, with what broke it.
type Violation struct {
	Invariant Invariant
	Detail    string
}

func (v Violation) String() string { return string(v.Invariant) + ": " + v.Detail }

// Querier is what the checkers need from PostgreSQL (a *pgx.Conn or a pool).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Execer runs a statement (a *pgx.Conn or a pool).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Scope limits a check to one run's objects, because PostgreSQL and the
// control plane are shared with other runs and tests. A tagged object is in
// scope when its name starts with NamePrefix or its tag names one of
// OwnerUIDs (a database half-way through its create carries a pending name
// derived from its tag, not its final name).
type Scope struct {
	NamePrefix string
	OwnerUIDs  map[string]bool
}

// Tagged is one role or database in PostgreSQL that the operator may have
// created: with a finale ownership tag, or a database under a pending name
// (catalog.PendingPrefix) whose tag may never have been set.
type Tagged struct {
	Kind, Name, Tag string
}

// UID is the owner UID the tag names; "" for an untagged pending database.
func (t Tagged) UID() string {
	if t.Tag == "" {
		return ""
	}
	return t.Tag[strings.LastIndex(t.Tag, ":")+1:]
}

func (s Scope) has(t Tagged) bool {
	if t.Tag == "" {
		return s.pending()[t.Name] != ""
	}
	return (s.NamePrefix != "" && strings.HasPrefix(t.Name, s.NamePrefix)) || s.OwnerUIDs[t.UID()]
}

// pending maps the pending database name of each owner in scope to its UID.
func (s Scope) pending() map[string]string {
	out := map[string]string{}
	for uid := range s.OwnerUIDs {
		out[catalog.PendingDatabaseName(ledger.TagPrefix+"database:"+uid)] = uid
	}
	return out
}

// ListTagged lists the roles and databases in PostgreSQL whose comment is a
// finale ownership tag, and the databases under a pending name whatever
// their comment, within scope.
func ListTagged(ctx context.Context, db Querier, scope Scope) ([]Tagged, error) {
	rows, err := db.Query(ctx, `
		SELECT 'role', r.rolname, d.description FROM pg_roles r
		  JOIN pg_shdescription d ON d.objoid = r.oid AND d.classoid = 'pg_authid'::regclass
		  WHERE d.description LIKE $1
		UNION ALL
		SELECT 'database', b.datname, coalesce(d.description, '') FROM pg_database b
		  LEFT JOIN pg_shdescription d ON d.objoid = b.oid AND d.classoid = 'pg_database'::regclass
		  WHERE d.description LIKE $1 OR b.datname LIKE $2
		ORDER BY 1, 2`, ledger.TagPrefix+"%", catalog.PendingPrefix+"%")
	if err != nil {
		return nil, fmt.Errorf("list tagged objects in PostgreSQL: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tagged, error) {
		var t Tagged
		return t, r.Scan(&t.Kind, &t.Name, &t.Tag)
	})
	if err != nil {
		return nil, fmt.Errorf("list tagged objects in PostgreSQL: %w", err)
	}
	var out []Tagged
	for _, t := range all {
		if scope.has(t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// CheckNoLeak checks the no-leak invariant: each tagged role or database in
// scope has a live Role or Database with the tag's UID, anywhere in the
// cluster, or a cleanup record (ConfigMap ledger.NamePrefix+UID) in
// recordsNamespace ("" when the build keeps no records).
func CheckNoLeak(ctx context.Context, db Querier, c client.Reader, recordsNamespace string, scope Scope) ([]Violation, error) {
	tagged, err := ListTagged(ctx, db, scope)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	var roles v1alpha1.RoleList
	var dbs v1alpha1.DatabaseList
	if err := c.List(ctx, &roles); err != nil {
		return nil, fmt.Errorf("list Roles: %w", err)
	}
	if err := c.List(ctx, &dbs); err != nil {
		return nil, fmt.Errorf("list Databases: %w", err)
	}
	for _, r := range roles.Items {
		live[string(r.UID)] = true
	}
	for _, d := range dbs.Items {
		live[string(d.UID)] = true
	}
	records := map[string]bool{}
	if recordsNamespace != "" {
		var cms corev1.ConfigMapList
		if err := c.List(ctx, &cms, client.InNamespace(recordsNamespace)); err != nil {
			return nil, fmt.Errorf("list cleanup records in %s: %w", recordsNamespace, err)
		}
		for _, cm := range cms.Items {
			if uid, ok := strings.CutPrefix(cm.Name, ledger.NamePrefix); ok {
				records[uid] = true
			}
		}
	}
	var out []Violation
	pending := scope.pending()
	for _, t := range tagged {
		uid := t.UID()
		if t.Tag == "" {
			uid = pending[t.Name] // an untagged pending database: whose name is it?
		}
		if !live[uid] && !records[uid] {
			out = append(out, Violation{NoLeak, fmt.Sprintf("%s %s (tag %q) has no owner object and no cleanup record", t.Kind, t.Name, t.Tag)})
		}
	}
	return out, nil
}

// CheckFinished checks the finished invariant: every object in objs is gone
// within bound (the caller heals its faults first). Each one still there at
// the bound is a violation naming its finalizers.
func CheckFinished(ctx context.Context, c client.Reader, bound time.Duration, objs ...client.Object) ([]Violation, error) {
	left := func(ctx context.Context) ([]client.Object, error) {
		var out []client.Object
		for _, o := range objs {
			err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
		return out, nil
	}
	err := controlplane.WaitFor(ctx, bound, fmt.Sprintf("%d deletion(s) to finish", len(objs)), func(ctx context.Context) (bool, error) {
		l, err := left(ctx)
		return err == nil && len(l) == 0, err
	})
	if err == nil {
		return nil, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	l, lerr := left(ctx)
	if lerr != nil {
		return nil, fmt.Errorf("%w; then: %w", err, lerr)
	}
	var out []Violation
	for _, o := range l {
		out = append(out, Violation{Finished, fmt.Sprintf("%T %s/%s not gone after %s (finalizers %q)", o, o.GetNamespace(), o.GetName(), bound, o.GetFinalizers())})
	}
	return out, nil
}

// Untagged are roles and databases with no finale tag (or somebody else's
// comment), seeded next to the operator's objects: the operator must never
// drop them.
type Untagged struct {
	Roles, Databases []string
}

// SeedUntagged creates n roles and one database named prefix+"keep_...":
// half the roles carry a non-finale comment, the rest none.
func SeedUntagged(ctx context.Context, db Execer, prefix string, n int) (Untagged, error) {
	var u Untagged
	for i := range n {
		name := fmt.Sprintf("%skeep_r%d", prefix, i)
		if _, err := db.Exec(ctx, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return u, fmt.Errorf("seed untagged role: %w", err)
		}
		u.Roles = append(u.Roles, name)
		if i%2 == 1 {
			if _, err := db.Exec(ctx, "COMMENT ON ROLE "+pgx.Identifier{name}.Sanitize()+" IS 'owned by somebody else'"); err != nil {
				return u, fmt.Errorf("comment untagged role: %w", err)
			}
		}
	}
	name := prefix + "keep_db"
	if _, err := db.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return u, fmt.Errorf("seed untagged database: %w", err)
	}
	u.Databases = append(u.Databases, name)
	return u, nil
}

// Drop removes the seeded objects (after the check).
func (u Untagged) Drop(ctx context.Context, db Execer) error {
	for _, d := range u.Databases {
		if _, err := db.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d}.Sanitize()); err != nil {
			return err
		}
	}
	for _, r := range u.Roles {
		if _, err := db.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// CheckNoWrongDelete checks that every seeded untagged object still exists.
func CheckNoWrongDelete(ctx context.Context, db Querier, u Untagged) ([]Violation, error) {
	exists := func(sql, name string) (bool, error) {
		rows, err := db.Query(ctx, sql, name)
		if err != nil {
			return false, err
		}
		n, err := pgx.CollectRows(rows, pgx.RowTo[int])
		return len(n) > 0, err
	}
	var out []Violation
	for _, r := range u.Roles {
		ok, err := exists("SELECT 1 FROM pg_roles WHERE rolname = $1", r)
		if err != nil {
			return nil, fmt.Errorf("look up role %s: %w", r, err)
		}
		if !ok {
			out = append(out, Violation{NoWrongDelete, "untagged role " + r + " was dropped"})
		}
	}
	for _, d := range u.Databases {
		ok, err := exists("SELECT 1 FROM pg_database WHERE datname = $1", d)
		if err != nil {
			return nil, fmt.Errorf("look up database %s: %w", d, err)
		}
		if !ok {
			out = append(out, Violation{NoWrongDelete, "untagged database " + d + " was dropped"})
		}
	}
	return out, nil
}

// dropTagged drops what a naive run leaked, so later runs and leak checks
// start clean. Only objects in scope are touched.
func dropTagged(ctx context.Context, db interface {
	Querier
	Execer
}, scope Scope) error {
	tagged, err := ListTagged(ctx, db, scope)
	if err != nil {
		return err
	}
	sort.Slice(tagged, func(i, j int) bool { return tagged[i].Kind < tagged[j].Kind }) // databases before roles
	for _, t := range tagged {
		stmt := "DROP ROLE IF EXISTS "
		if t.Kind == "database" {
			stmt = "DROP DATABASE IF EXISTS "
		}
		if _, err := db.Exec(ctx, stmt+pgx.Identifier{t.Name}.Sanitize()); err != nil {
			return fmt.Errorf("drop leaked %s %s: %w", t.Kind, t.Name, err)
		}
	}
	return nil
}

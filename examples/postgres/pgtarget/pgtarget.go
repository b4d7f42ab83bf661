// Package pgtarget is a test external service on a real PostgreSQL server:
// its resources are roles, tagged with COMMENT ON ROLE ... IS '<tag>', and it
// proves its deployment (the cluster's system identifier and the database's
// name) with the reference operator's sentinel query (catalog.Prove).
//
// It implements ledger.Target. It is test machinery, under internal/.
package pgtarget

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/ledger"
)

// Sentinel is the table that holds the deployment identity.
const Sentinel = "finale_sentinel"

// Target is one connection to one PostgreSQL server; a pgx.Conn is not safe
// for concurrent use, so calls take turns.
type Target struct {
	mu   sync.Mutex // guards conn
	conn *pgx.Conn
}

type pooled struct{ t *Target }

func (p pooled) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	return p.t.conn.Exec(ctx, sql, args...)
}

// QueryRow runs the query when its row is scanned, holding the lock.
func (p pooled) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return lockedRow{p: p, ctx: ctx, sql: sql, args: args}
}

// Query holds the lock until the rows are closed.
func (p pooled) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	p.t.mu.Lock()
	rows, err := p.t.conn.Query(ctx, sql, args...)
	if err != nil {
		p.t.mu.Unlock()
		return nil, err
	}
	return &lockedRows{Rows: rows, unlock: p.t.mu.Unlock}, nil
}

type lockedRow struct {
	p    pooled
	ctx  context.Context
	sql  string
	args []any
}

func (r lockedRow) Scan(dest ...any) error { return r.p.queryRow(r.ctx, r.sql, r.args, dest...) }

type lockedRows struct {
	pgx.Rows
	once   sync.Once
	unlock func()
}

func (r *lockedRows) Close() {
	r.Rows.Close()
	r.once.Do(r.unlock)
}

func (p pooled) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	return p.t.conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

var _ ledger.Target = (*Target)(nil)

// Open connects to dsn.
func Open(ctx context.Context, dsn string) (*Target, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("pgtarget: %w", err)
	}
	return &Target{conn: conn}, nil
}

// Close closes the connection.
func (t *Target) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	_ = t.conn.Close(context.Background())
}

func (t *Target) pool() pooled { return pooled{t} }

// sentinel: one per test database, so every Fresh target is its own
// deployment, and a copy of the cluster is the same one.
var sentinel = catalog.Sentinel{
	Table:      Sentinel,
	Deployment: catalog.SystemIdentifier + ` || '/' || current_database()`,
	Tagged:     catalog.TaggedRoles,
}

// Prove implements ledger.Prover with the reference operator's query:
// the answer is computed inside PostgreSQL, one round trip per call.
func (t *Target) Prove(ctx context.Context, q ledger.Question) (ledger.Answer, error) {
	return catalog.Prove(ctx, t.pool(), sentinel, q)
}

// Token returns the raw sentinel token stored for keyID, for tests that
// scan records for it.
func (t *Target) Token(ctx context.Context, keyID string) (string, error) {
	var tok string
	err := t.pool().queryRow(ctx, `SELECT token FROM `+Sentinel+` WHERE key_id = $1`, []any{keyID}, &tok)
	return tok, err
}

// CreateRole creates a NOLOGIN role named name carrying tag, atomically.
func (t *Target) CreateRole(ctx context.Context, name, tag string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return pgx.BeginFunc(ctx, t.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE ROLE `+pgx.Identifier{name}.Sanitize()+` NOLOGIN`); err != nil {
			return fmt.Errorf("pgtarget: create role %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `COMMENT ON ROLE `+pgx.Identifier{name}.Sanitize()+` IS `+quote(tag)); err != nil {
			return fmt.Errorf("pgtarget: tag role %s: %w", name, err)
		}
		return nil
	})
}

// RandomName returns prefix plus random hex, a role name a retried create
// would not repeat (so that a duplicate would be visible).
func RandomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// FindByTag implements ledger.Conn.
func (t *Target) FindByTag(ctx context.Context, tag string) ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rows, err := t.conn.Query(ctx, `SELECT r.rolname FROM pg_roles r
		JOIN pg_shdescription d ON d.objoid = r.oid AND d.classoid = 'pg_authid'::regclass
		WHERE d.description = $1 ORDER BY r.rolname`, tag)
	if err != nil {
		return nil, fmt.Errorf("pgtarget: find by tag: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pgtarget: find by tag: %w", err)
	}
	return names, nil
}

// Delete implements ledger.Target: it drops role id only while it carries
// tag; a role that is gone, or carries another tag, is left alone and is
// success.
func (t *Target) Delete(ctx context.Context, id, tag string) error {
	if id == "" {
		return errors.New("pgtarget: empty role name")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return pgx.BeginFunc(ctx, t.conn, func(tx pgx.Tx) error {
		var got string
		err := tx.QueryRow(ctx, `SELECT coalesce(shobj_description(oid, 'pg_authid'), '') FROM pg_roles WHERE rolname = $1`, id).Scan(&got)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && got != tag) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("pgtarget: read tag of role %s: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `DROP ROLE `+pgx.Identifier{id}.Sanitize()); err != nil {
			return fmt.Errorf("pgtarget: drop role %s: %w", id, err)
		}
		return nil
	})
}

// RoleExists reports whether role name exists.
func (t *Target) RoleExists(ctx context.Context, name string) (bool, error) {
	var ok bool
	err := t.pool().queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, []any{name}, &ok)
	return ok, err
}

// Exec runs sql, for test setup.
func (t *Target) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.pool().Exec(ctx, sql, args...)
	return err
}

func quote(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

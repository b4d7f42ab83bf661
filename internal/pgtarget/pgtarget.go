// Package pgtarget is a test external service on a real PostgreSQL server:
// its resources are roles, tagged with COMMENT ON ROLE ... IS '<tag>', and its
// deployment identity is a sentinel table holding a random deployment ID and
// proof token, created on first contact.
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

// Identify implements ledger.Identifier: it creates the sentinel on first
// contact (two racing first contacts agree: the insert is ON CONFLICT DO
// NOTHING) and reads it back.
func (t *Target) Identify(ctx context.Context) (ledger.Identity, error) {
	if _, err := t.pool().Exec(ctx, `CREATE TABLE IF NOT EXISTS `+Sentinel+` (
		singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
		deployment text NOT NULL,
		token text NOT NULL)`); err != nil {
		return ledger.Identity{}, fmt.Errorf("pgtarget: sentinel table: %w", err)
	}
	dep, tok := make([]byte, 16), make([]byte, 32)
	_, _ = rand.Read(dep)
	_, _ = rand.Read(tok)
	if _, err := t.pool().Exec(ctx, `INSERT INTO `+Sentinel+` (deployment, token) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		"pg-"+hex.EncodeToString(dep), hex.EncodeToString(tok)); err != nil {
		return ledger.Identity{}, fmt.Errorf("pgtarget: sentinel: %w", err)
	}
	var id ledger.Identity
	var token string
	if err := t.pool().queryRow(ctx, `SELECT deployment, token FROM `+Sentinel, nil, &id.Deployment, &token); err != nil {
		return ledger.Identity{}, fmt.Errorf("pgtarget: read sentinel: %w", err)
	}
	id.Token = []byte(token)
	return id, nil
}

// Token returns the raw sentinel token, for tests that scan records for it.
func (t *Target) Token(ctx context.Context) (string, error) {
	id, err := t.Identify(ctx)
	return string(id.Token), err
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

// Delete implements ledger.Target: dropping a role that is gone is success.
func (t *Target) Delete(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("pgtarget: empty role name")
	}
	if _, err := t.pool().Exec(ctx, `DROP ROLE IF EXISTS `+pgx.Identifier{id}.Sanitize()); err != nil {
		return fmt.Errorf("pgtarget: drop role %s: %w", id, err)
	}
	return nil
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

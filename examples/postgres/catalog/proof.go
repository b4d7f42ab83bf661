package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/finale-dev/finale/ledger"
)

// Sentinel says where a database keeps the deployment sentinels and how the
// proof query reads the deployment and the tagged objects.
type Sentinel struct {
	// Table holds one sentinel per operator key: key_id, salt, token. It
	// is created in the connection's database on first enrolment, owned by
	// the operator's login, so only that login and superusers read tokens.
	Table string
	// Deployment is an SQL expression for the deployment identifier.
	Deployment string
	// Tagged is an SQL query listing the names that carry the tag $3.
	Tagged string
}

// Deployment expressions and tagged-object queries.
const (
	// SystemIdentifier is the cluster's system_identifier (see Identity).
	SystemIdentifier = `(SELECT system_identifier::text FROM pg_control_system())`
	// TaggedRoles lists the roles carrying tag $3.
	TaggedRoles = `SELECT r.rolname::text FROM pg_roles r JOIN pg_shdescription d ON d.objoid = r.oid AND d.classoid = 'pg_authid'::regclass WHERE d.description = $3`
	// TaggedDatabases lists the databases carrying tag $3.
	TaggedDatabases = `SELECT db.datname::text FROM pg_database db JOIN pg_shdescription d ON d.objoid = db.oid AND d.classoid = 'pg_database'::regclass WHERE d.description = $3`
)

// ErrNoSentinel: the database holds no sentinel for the operator's key and
// the question did not ask to enrol one.
var ErrNoSentinel = errors.New("no deployment sentinel for this operator's key in this database")

// Prove answers q inside PostgreSQL: one statement reads the sentinel of
// q.KeyID, the deployment, and the names carrying q.Tag, and computes
// ledger.Respond over them with sha256() where the token is stored, so the
// token never crosses the wire and the list of tagged names cannot be
// altered on the way without the response failing. With q.Enroll set, a
// database without a sentinel for the key gets one first (the only time a
// token is sent).
//
// Enrolling needs CREATE on the connection database's public schema (to
// create the table once) and the role running the query must read the
// catalogs; both hold for an owner of the database.
//
// The proof is asked first and the sentinel written only when the answer
// says there is none: enrolling every time cost two more round trips on
// every create (the table's CREATE IF NOT EXISTS and an INSERT that does
// nothing once a sentinel exists), and sent the token over the wire on
// every create rather than once. The answer is the same either way: it is
// computed from the sentinel stored for the key, and an enrolment racing
// this one keeps the first sentinel (ON CONFLICT DO NOTHING), which the
// proof after it then reads.
func Prove(ctx context.Context, c Querier, s Sentinel, q ledger.Question) (ledger.Answer, error) {
	a, err := prove(ctx, c, s, q)
	if q.Enroll == nil || !errors.Is(err, ErrNoSentinel) {
		return a, err
	}
	if err := enroll(ctx, c, s, q); err != nil {
		return ledger.Answer{}, err
	}
	return prove(ctx, c, s, q)
}

// prove is Prove's one statement, without enrolment.
func prove(ctx context.Context, c Querier, s Sentinel, q ledger.Question) (ledger.Answer, error) {
	// f(x) is one length-prefixed field of ledger.ResponseMessage; "C"
	// collation sorts names by bytes, as Go does.
	const f = `(E'\n' || octet_length(%[1]s)::text || ':' || %[1]s)`
	field := func(x string) string { return fmt.Sprintf(f, x) }
	sql := `WITH s AS (SELECT salt, token FROM ` + pgx.Identifier{s.Table}.Sanitize() + ` WHERE key_id = $1),
		d AS (SELECT ` + s.Deployment + ` AS dep),
		t AS (SELECT n FROM (` + s.Tagged + `) x(n) WHERE $3 <> '')
	SELECT s.salt, d.dep,
		coalesce((SELECT array_agg(n ORDER BY n COLLATE "C") FROM t), '{}'),
		encode(sha256(convert_to('` + ledger.ProofVersion + `' || ` + field("s.token") + ` || ` + field("$1::text") + ` || ` +
		field("$2::text") + ` || ` + field("d.dep") + ` || ` + field("s.salt") + ` || ` + field("$3::text") + ` ||
			coalesce((SELECT string_agg(` + field("n") + `, '' ORDER BY n COLLATE "C") FROM t), ''), 'UTF8')), 'hex')
	FROM s, d`
	var a ledger.Answer
	err := c.QueryRow(ctx, sql, q.KeyID, q.Challenge, q.Tag).Scan(&a.Salt, &a.Deployment, &a.Tagged, &a.Response)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.Answer{}, ErrNoSentinel
	case err != nil:
		if code, _ := sqlstate(err); code == sqlstateUndefinedTable {
			return ledger.Answer{}, ErrNoSentinel
		}
		return ledger.Answer{}, fmt.Errorf("prove deployment: %w", err)
	}
	return a, nil
}

func enroll(ctx context.Context, c Querier, s Sentinel, q ledger.Question) error {
	table := pgx.Identifier{s.Table}.Sanitize()
	// Two first contacts may race on CREATE TABLE IF NOT EXISTS (a unique
	// violation in pg_type); the second try sees the table.
	var err error
	for try := 0; try < 2; try++ {
		if _, err = c.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
			key_id text PRIMARY KEY,
			salt text NOT NULL,
			token text NOT NULL)`); err == nil {
			break
		}
	}
	if err != nil {
		if code, _ := sqlstate(err); code == sqlstateInsufficientPrivilege {
			return &Error{Reason: ReasonSentinelRefused, Kind: KindDatabase, Name: s.Table, Err: err}
		}
		return fmt.Errorf("create the deployment sentinel table: %w", err)
	}
	if _, err := c.Exec(ctx, `INSERT INTO `+table+` (key_id, salt, token) VALUES ($1, $2, $3) ON CONFLICT (key_id) DO NOTHING`,
		q.KeyID, q.Enroll.Salt, q.Enroll.Token); err != nil {
		return fmt.Errorf("enrol the deployment sentinel: %w", err)
	}
	return nil
}

package controller

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/clientpool"
	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
)

// Key identifies a pooled connection: everything it is bound to at dial
// time and nothing secret. SecretVersion is the credential Secret's
// resourceVersion, read on every reconcile, so that a changed Secret gets a
// new connection with the new credentials instead of the cached one.
type Key struct {
	Namespace, Server string
	Host              string
	Port              int32
	Database          string
	SSLMode           v1alpha1.SSLMode
	// Secret and its keys name the credentials (and the CA certificates,
	// CAKey, "" for the system roots: spec.trustSystemRoots); SecretVersion is its
	// resourceVersion.
	Secret, UsernameKey, PasswordKey, CAKey string
	SecretVersion                           string
}

func (k Key) String() string {
	return fmt.Sprintf("%s/%s (%s:%d/%s)", k.Namespace, k.Server, k.Host, k.Port, k.Database)
}

// Sentinel is the table, in the Server's database, that holds the
// deployment sentinels: one per operator key, its salt and its token, read
// only inside the proof query (catalog.Prove). spec.database is immutable
// for this reason: a sentinel lives in one database.
const Sentinel = "finale_deployment_sentinels"

// Sentinels of the two kinds: the same table, each listing its own kind's
// tagged objects in the answer.
var (
	roleSentinel     = catalog.Sentinel{Table: Sentinel, Deployment: catalog.SystemIdentifier, Tagged: catalog.TaggedRoles}
	databaseSentinel = catalog.Sentinel{Table: Sentinel, Deployment: catalog.SystemIdentifier, Tagged: catalog.TaggedDatabases}
)

// Conn is one PostgreSQL session; it implements catalog.Querier. A pgx.Conn
// is not safe for concurrent use, so calls take turns (mu is held from a
// query until its row is scanned or its rows are closed). Nothing about the
// deployment is cached: a proof is a round trip every time, because a
// proxy in the path can splice a session onto another server at any point.
type Conn struct {
	mu   sync.Mutex // guards conn
	conn *pgx.Conn
	// hook, when set, hears of every statement's round trip (see
	// PoolOptions.Statements); set at dial, read-only after.
	hook func(ctx context.Context, sql string, err error)
}

// heard tells the hook, if any, that a statement's round trip ended.
// Called without mu, so a hook may stop the operator.
func (c *Conn) heard(ctx context.Context, sql string, err error) {
	if c.hook != nil {
		c.hook(ctx, sql, err)
	}
}

var _ catalog.Querier = (*Conn)(nil)

// Exec implements catalog.Querier.
func (c *Conn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.mu.Lock()
	tag, err := c.conn.Exec(ctx, sql, args...)
	err = c.closed(err)
	c.mu.Unlock()
	c.heard(ctx, sql, err)
	return tag, err
}

// closed marks an error after which the session is dead (pgx closes it on
// a fatal error or a cancelled query) as net.ErrClosed, a Transport error,
// so that the pool evicts it whatever the error said. Called with mu held.
func (c *Conn) closed(err error) error {
	if err != nil && c.conn.IsClosed() {
		return fmt.Errorf("%w (the PostgreSQL session is closed): %w", net.ErrClosed, err)
	}
	return err
}

// QueryRow implements catalog.Querier; the session is released by Scan.
func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.mu.Lock()
	return lockedRow{row: c.conn.QueryRow(ctx, sql, args...), c: c, ctx: ctx, sql: sql}
}

// Query implements catalog.Querier; the session is released by Close.
func (c *Conn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.mu.Lock()
	rows, err := c.conn.Query(ctx, sql, args...)
	if err != nil {
		err = c.closed(err)
		c.mu.Unlock()
		c.heard(ctx, sql, err)
		return nil, err
	}
	// The statement was sent and its first reply read: that is the round
	// trip a crash right after it must follow.
	c.heard(ctx, sql, nil)
	return &lockedRows{Rows: rows, unlock: c.mu.Unlock}, nil
}

// lockedRow's round trip ends in Scan: pgx sends the query in QueryRow but
// reports its outcome only there.
type lockedRow struct {
	row pgx.Row
	c   *Conn
	ctx context.Context
	sql string
}

func (r lockedRow) Scan(dest ...any) error {
	err := r.c.closed(r.row.Scan(dest...))
	r.c.mu.Unlock()
	r.c.heard(r.ctx, r.sql, err)
	return err
}

type lockedRows struct {
	pgx.Rows
	once   sync.Once
	unlock func()
}

func (r *lockedRows) Close() {
	r.Rows.Close()
	r.once.Do(r.unlock)
}

// Ping makes one round trip.
func (c *Conn) Ping(ctx context.Context) error {
	_, err := c.Exec(ctx, "SELECT 1")
	return err
}

// Close ends the session.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.conn.Close(ctx)
}

// Pool is the operator's connection pool.
type Pool = clientpool.Pool[Key, *Conn]

// PoolOptions tune NewPool.
type PoolOptions struct {
	// Name labels the pool's metrics.
	Name string
	// Naive keeps every connection whatever its calls return (the seed
	// incident's pool), for the comparisons; never in production.
	Naive bool
	// CallTimeout bounds each call; zero is 30s. A call that times out is a
	// Transport error and evicts its connection.
	CallTimeout time.Duration
	// Classifier classifies call errors for eviction; nil is
	// errclass.New(catalog.Classify).
	Classifier *errclass.Classifier
	// Statements, when set, is called after each statement's round trip
	// (Exec, a QueryRow's Scan, Query) with its SQL and outcome, outside
	// the session's lock; the fault campaigns crash the operator from it.
	// Nil costs nothing.
	Statements func(ctx context.Context, sql string, err error)
	// Fence, when set, stops every call and dial once this replica may no
	// longer hold its lease (clientpool.Options.Fence).
	Fence clientpool.Fence
	// ConnectTimeout bounds a connection attempt; zero is
	// DefaultConnectTimeout. A connection that fails for want of an answer
	// (refused, reset, silent) fails only once it has passed, whatever
	// the cause, so how long a Server takes to report a failure tells its
	// author nothing about what listens at the address. Such a failure is
	// then given at once to every dial of the same connection for
	// ConnectTimeout: otherwise each dependent of a dead Server, in turn,
	// holds a worker for the whole timeout, and one tenant's dead Server
	// starves everyone's reconciles.
	ConnectTimeout time.Duration
	// Clock times those remembered failures; nil is the real clock, as
	// the connect timeout itself runs on (the operator's Options.Clock may
	// be a test's stepped clock, which would keep a failure for ever).
	Clock clock.PassiveClock
}

// DefaultConnectTimeout is PoolOptions.ConnectTimeout when unset.
const DefaultConnectTimeout = 10 * time.Second

// ErrCredentials is wrapped when the credential Secret lacks a key.
var ErrCredentials = errors.New("credential Secret incomplete")

// ErrCA is wrapped when the credential Secret's CA key holds no PEM
// certificate.
var ErrCA = errors.New("credential Secret holds no CA certificate")

// ErrCAMissing is wrapped (with ErrCA) when the credential Secret has no
// CA key at all, while the sslMode must verify the server's certificate:
// the default Server, whose Secret does not hold its CA yet.
var ErrCAMissing = fmt.Errorf("%w: no such key", ErrCA)

// NewPool returns the pool: dial reads the credential Secret through r (use
// an uncached reader, so a dial sees the Secret as it is now).
func NewPool(r client.Reader, o PoolOptions) (*Pool, error) {
	if o.CallTimeout == 0 {
		o.CallTimeout = 30 * time.Second
	}
	if o.Classifier == nil {
		o.Classifier = errclass.New(catalog.Classify)
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ConnectTimeout < 0 {
		return nil, fmt.Errorf("PoolOptions.ConnectTimeout %s is negative", o.ConnectTimeout)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	failed := &recentFailures{clock: o.Clock, keep: o.ConnectTimeout, last: map[Key]recentFailure{}}
	opts := clientpool.Options[Key, *Conn]{
		Name: o.Name,
		Dial: clientpool.DialFn[Key, *Conn](func(ctx context.Context, k Key) (*Conn, error) {
			if err := failed.get(k); err != nil {
				return nil, err
			}
			c, err := dial(ctx, r, k, o.Statements, o.ConnectTimeout, StatementTimeout(o.CallTimeout), o.Classifier)
			failed.put(k, err, err != nil && o.Classifier.Classify(ctx, err) == errclass.Transport)
			return c, err
		}),
		Close:       clientpool.CloseFn[*Conn](func(c *Conn) error { return c.Close() }),
		CallTimeout: o.CallTimeout,
		IdleTimeout: 10 * time.Minute,
		Classifier:  o.Classifier,
		Fence:       o.Fence,
	}
	if o.Naive {
		opts.Policy = clientpool.NeverEvict
		opts.CallTimeout = 0
		o.CallTimeout = 0 // and no bound on the server's side either
	}
	return clientpool.New(opts)
}

// StatementTimeout is the server-side bound on the lock waits (the
// lock_timeout, see dial) of every statement of a pool whose calls are
// bounded by callTimeout: four fifths of it, so that the server gives up a
// wait before its client does, and never below minStatementTimeout.
// CreateLanding follows it. It does not lengthen a call: pgx sends a
// cancel request for the statement of a call abandoned at its timeout, so
// a CREATE DATABASE slower than the call timeout is cancelled whenever the
// request arrives, and a slow service needs a longer call timeout. Zero
// for unbounded calls.
func StatementTimeout(callTimeout time.Duration) time.Duration {
	if callTimeout <= 0 {
		return 0
	}
	return max(callTimeout*4/5, minStatementTimeout)
}

// minStatementTimeout is StatementTimeout's floor.
const minStatementTimeout = 10 * time.Second

// CreateLanding is how long after a create call's timeout PostgreSQL may
// still complete the create (lifecycle.Kind.CreateLanding): the statement
// timeout, and a second for the commit's flush. Every statement a create
// sends reaches the server before the call's deadline, so it ends within
// the statement timeout after it, with one exception that waits on no one:
// a role's COMMENT, sent in one query with its CREATE ROLE, acts on a role
// no other session can see until that query commits. What this cannot
// bound is a network path that holds a statement back and delivers it
// later than that.
func CreateLanding(callTimeout time.Duration) time.Duration {
	if callTimeout <= 0 {
		return 0
	}
	return StatementTimeout(callTimeout) + time.Second
}

// recentFailures remembers each connection's last Transport dial failure
// for keep (PoolOptions.ConnectTimeout).
type recentFailures struct {
	clock clock.PassiveClock
	keep  time.Duration
	mu    sync.Mutex // guards last
	last  map[Key]recentFailure
}

type recentFailure struct {
	err error
	at  time.Time
}

// get returns k's remembered failure while it is fresh, wrapped so that it
// keeps its class.
func (f *recentFailures) get(k Key) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	last, ok := f.last[k]
	if !ok {
		return nil
	}
	if age := f.clock.Since(last.at); age < f.keep {
		return fmt.Errorf("%w (not dialled again: the last attempt failed %s ago)", last.err, age.Round(time.Millisecond))
	}
	delete(f.last, k)
	return nil
}

// put records the outcome of a dial of k: remember is whether err is a
// failure to remember; anything else forgets k's.
func (f *recentFailures) put(k Key, err error, remember bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !remember {
		delete(f.last, k)
		return
	}
	now := f.clock.Now()
	for key, l := range f.last { // keys of Servers long gone do not pile up
		if now.Sub(l.at) >= f.keep {
			delete(f.last, key)
		}
	}
	f.last[k] = recentFailure{err: err, at: now}
}

func dial(ctx context.Context, r client.Reader, k Key, hook func(context.Context, string, error), timeout, stmt time.Duration, cl *errclass.Classifier) (*Conn, error) {
	var s corev1.Secret
	if err := r.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Secret}, &s); err != nil {
		return nil, fmt.Errorf("read credential Secret %s/%s: %w", k.Namespace, k.Secret, err)
	}
	user, pass := string(s.Data[k.UsernameKey]), string(s.Data[k.PasswordKey])
	if user == "" || pass == "" {
		return nil, fmt.Errorf("%w: Secret %s/%s needs non-empty keys %q and %q", ErrCredentials, k.Namespace, k.Secret, k.UsernameKey, k.PasswordKey)
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, pass),
		Host:     net.JoinHostPort(k.Host, strconv.Itoa(int(k.Port))),
		Path:     "/" + k.Database,
		RawQuery: url.Values{"sslmode": {string(k.SSLMode)}}.Encode(),
	}
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("connection settings of %s: %w", k, err)
	}
	if k.CAKey != "" && (k.SSLMode == v1alpha1.SSLModeVerifyCA || k.SSLMode == v1alpha1.SSLModeVerifyFull) {
		roots := x509.NewCertPool()
		if _, ok := s.Data[k.CAKey]; !ok {
			return nil, fmt.Errorf("%w: Secret %s/%s key %q", ErrCAMissing, k.Namespace, k.Secret, k.CAKey)
		}
		if !roots.AppendCertsFromPEM(s.Data[k.CAKey]) {
			return nil, fmt.Errorf("%w: Secret %s/%s key %q", ErrCA, k.Namespace, k.Secret, k.CAKey)
		}
		// pgx verifies with the config's RootCAs (verify-full) or its own
		// chain check over them (verify-ca), as with sslrootcert.
		if cfg.TLSConfig != nil {
			cfg.TLSConfig.RootCAs = roots
		}
		for _, fb := range cfg.Fallbacks {
			if fb.TLSConfig != nil {
				fb.TLSConfig.RootCAs = roots
			}
		}
	}
	cfg.ConnectTimeout = timeout
	if stmt > 0 {
		// The pool abandons a call at its timeout. pgx then sends a cancel
		// request on a new connection and closes the socket, and neither
		// is sure to reach the backend (the path to it may be what
		// failed): a CREATE ROLE blocked on a lock committed seconds after
		// its client was gone, and its role had no cleanup record any
		// more. The lock timeout ends such a wait whatever the network
		// does, which is what CreateLanding counts on. Only lock waits are
		// bounded: a statement_timeout cancelled a slow CREATE DATABASE
		// under load on every attempt, so it never completed (pgx's cancel
		// does the same to one still running at the call timeout, so a
		// slow service needs a longer call timeout). A statement that runs
		// (not waits) longer than the window can still land after it.
		cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(stmt.Milliseconds(), 10)
	}
	start := time.Now()
	var seen replies
	if requiresTLS(k.SSLMode) {
		cfg.DialFunc = seen.wrap(cfg.DialFunc)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil && seen.declined.Load() {
		// The server (or whatever answers at its address) declined TLS:
		// nothing proved the server's identity, and the login was not
		// attempted. An Identity failure, never a wrong password.
		err = fmt.Errorf("%w: %w", errclass.ErrNoTLS, err)
	}
	if err != nil {
		if cl.Classify(ctx, err) == errclass.Transport {
			// A closed port fails at once, a silent address at the
			// timeout: both fail at the timeout.
			t := time.NewTimer(timeout - time.Since(start))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		return nil, fmt.Errorf("connect to %s: %w", k, err)
	}
	return &Conn{conn: conn, hook: hook}, nil
}

// requiresTLS: the sslModes under which pgx never falls back to plain text.
func requiresTLS(m v1alpha1.SSLMode) bool {
	return m == v1alpha1.SSLModeRequire || m == v1alpha1.SSLModeVerifyCA || m == v1alpha1.SSLModeVerifyFull
}

// noTLS is PostgreSQL's answer to SSLRequest when it will not speak TLS
// (protocol: a single byte, 'S' yes, 'N' no).
const noTLS = 'N'

// replies remembers whether any connection of one connect attempt got
// PostgreSQL's "no TLS" as the first byte the server sent. pgx reports a
// declined SSLRequest as an untyped error, and an address that speaks
// another protocol fails the same way; the first byte tells the two apart
// without reading error text: only a PostgreSQL server that declines TLS
// is an Identity failure, anything else stays Transport (a Server's status
// must not tell ports apart, SECURITY.md).
type replies struct{ declined atomic.Bool }

func (r *replies) wrap(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &firstByte{Conn: c, r: r}, nil
	}
}

// firstByte is a connection that tells replies its first byte read.
type firstByte struct {
	net.Conn
	r    *replies
	read atomic.Bool
}

func (c *firstByte) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.read.CompareAndSwap(false, true) && b[0] == noTLS {
		c.r.declined.Store(true)
	}
	return n, err
}

// Authentications of a connection (lifecycle.Authenticator): what makes
// sure it reaches the deployment itself, not a copy behind a proxy.
const (
	AuthVerifyFullCA     = "TLS verify-full: the server's certificate and host name verified against the CA in credential Secret %s/%s key %q"
	AuthVerifyFullSystem = "TLS verify-full: the server's certificate and host name verified against the operator's system roots"
	AuthTrustedHost      = "%s: the administrator vouches that every path to this host and port is authenticated (--sweep-trusted-hosts)"
)

// authentication is what authenticates the server at the end of a
// connection made with k, "" when nothing does. Only verify-full does: it
// checks that the server holds the private key of a certificate for k.Host
// from the pinned CAs, which a physical copy of the data does not carry
// (keep the key outside the data directory). require and below check no
// certificate, so a proxy terminates TLS and splices; verify-ca accepts
// any certificate of the CA, for any host, including a staging copy's own.
// SCRAM channel binding is not offered: it binds the login to the TLS
// session, but a copy holds the role's SCRAM secrets and can end that TLS
// session itself, so it adds nothing against a copy that verify-full does
// not. A host and port the admin listed in trusted (--sweep-trusted-hosts)
// counts too: a sidecar in the operator's pod that authenticates the server
// itself (a cloud SQL proxy, a mesh with server identities) is reached in
// plain text. Never a host alone: another process on another port of the
// same host (a splicing proxy) is not the sidecar.
func authentication(k Key, trusted *TrustedEndpoints) string {
	switch {
	case k.SSLMode == v1alpha1.SSLModeVerifyFull && k.CAKey != "":
		return fmt.Sprintf(AuthVerifyFullCA, k.Namespace, k.Secret, k.CAKey)
	case k.SSLMode == v1alpha1.SSLModeVerifyFull:
		return AuthVerifyFullSystem
	case trusted.Trusts(k.Host, k.Port):
		return fmt.Sprintf(AuthTrustedHost, net.JoinHostPort(k.Host, strconv.Itoa(int(k.Port))))
	}
	return ""
}

package errclass

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Class is what an error says about the client that returned it.
type Class string

// The classes. Transport, Auth and Identity mean the client (or its
// connection) is broken and should be dropped; the others are answers from
// a working one.
//
// Identity is the service's end failing to prove who it is: its certificate
// does not verify (unknown authority, wrong host name, expired or otherwise
// invalid), or it offers no TLS where TLS is required (ErrNoTLS). It is not
// Auth, which is the service refusing the client's credentials: under an
// interception the fix is the trust material or the network path, and an
// admin sent to the password would change the wrong thing.
const (
	Unknown   Class = "Unknown"
	Transport Class = "Transport"
	Auth      Class = "Auth"
	Identity  Class = "Identity"
	NotFound  Class = "NotFound"
	Conflict  Class = "Conflict"
	Throttled Class = "Throttled"
	Canceled  Class = "Canceled"
	Invalid   Class = "Invalid"
)

// Classes lists every class, for metrics that pre-create their series.
var Classes = []Class{Unknown, Transport, Auth, Identity, NotFound, Conflict, Throttled, Canceled, Invalid}

// Func classifies err, or reports false when it does not recognise it.
// ctx is the caller's context (may be nil).
type Func func(ctx context.Context, err error) (Class, bool)

// Classifier applies user-supplied Funcs first, then the built-in rules.
// The zero value applies the built-in rules only. A Classifier is immutable
// after New and safe for concurrent use.
type Classifier struct {
	extra []Func
}

// New returns a Classifier that tries extra, in order, before the built-in
// rules. Nil entries are ignored.
func New(extra ...Func) *Classifier {
	fs := make([]Func, 0, len(extra))
	for _, f := range extra {
		if f != nil {
			fs = append(fs, f)
		}
	}
	return &Classifier{extra: fs}
}

// ErrCallTimeout is the cause to give a per-call deadline
// (context.WithTimeoutCause, context.WithDeadlineCause). A context done with
// this cause says that the call's own bound fired, not that its caller gave
// up, so a Transport verdict stays Transport although the context is done.
// Only the code that owns the per-call bound should set it: a caller's
// deadline, a reconcile timeout or a shutdown must keep its own cause.
var ErrCallTimeout = errors.New("errclass: the call's own time bound passed without an answer")

// ErrNoTLS is what a client wraps when the service's end answered without
// TLS although the connection requires it (for PostgreSQL: the server
// declined SSLRequest under sslmode require or stricter). It classifies as
// Identity: nothing authenticated the service's end. Drivers report this
// case without a type of its own (pgx v5 returns a plain error), so the
// code that knows the connection required TLS wraps it.
var ErrNoTLS = errors.New("errclass: the service's end offered no TLS where TLS is required")

// Classify returns err's class; nil is "" (no error). ctx is the context the
// call ran with: when it is done, a Transport verdict is the caller giving
// up (Canceled), not the client being broken, unless the context's cause is
// ErrCallTimeout (the call's own bound fired first).
func (c *Classifier) Classify(ctx context.Context, err error) Class {
	if err == nil {
		return ""
	}
	if c != nil {
		for _, f := range c.extra {
			if cl, ok := f(ctx, err); ok {
				return cl
			}
		}
	}
	return builtin(ctx, err)
}

// Default is the built-in Classifier.
var Default = &Classifier{}

// Of classifies err with the built-in rules.
func Of(ctx context.Context, err error) Class { return Default.Classify(ctx, err) }

// builtin applies the caller-context rule on top of the per-source rules: a
// transport failure seen while the call's context is done is the caller
// giving up (shutdown, a reconcile that was cancelled or timed out), and
// shutdown must never evict a client. The exception is a context whose
// cause is ErrCallTimeout: its own per-call bound fired before anything
// else ended it, which is the signature of a client that does not answer.
//
// An error value that panics when inspected (a typed nil *StatusError
// wrapped in a non-nil error, say) is Unknown: classification sits on every
// call path and must not take the caller down with it.
func builtin(ctx context.Context, err error) (cl Class) {
	defer func() {
		if recover() != nil {
			cl = Unknown
		}
	}()
	cl = source(err)
	if cl == Transport && ctx != nil && ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrCallTimeout) {
		return Canceled
	}
	return cl
}

// source classifies by what produced err. Typed answers from a server (an
// API status, a gRPC status, an SQLSTATE, an HTTP code) are consulted before
// the transport errors they may wrap, because an answer proves the
// connection worked.
func source(err error) Class {
	if errors.Is(err, context.Canceled) {
		return Canceled
	}
	if errors.Is(err, ErrNoTLS) {
		return Identity
	}
	if cl, ok := kubernetes(err); ok {
		return cl
	}
	if cl, ok := grpcStatus(err); ok {
		return cl
	}
	if cl, ok := postgres(err); ok {
		return cl
	}
	var sc interface{ StatusCode() int }
	if errors.As(err, &sc) {
		if cl := HTTPStatus(sc.StatusCode()); cl != Unknown {
			return cl
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Transport
	}
	if cl, ok := tlsError(err); ok {
		return cl
	}
	if cl, ok := netError(err); ok {
		return cl
	}
	return Unknown
}

// HTTPStatus classifies an HTTP response status code. Codes it has no
// opinion on (including success codes) are Unknown.
func HTTPStatus(code int) Class {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired:
		return Auth
	case http.StatusNotFound, http.StatusGone:
		return NotFound
	case http.StatusConflict, http.StatusPreconditionFailed:
		return Conflict
	case http.StatusTooManyRequests:
		return Throttled
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return Transport
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusMethodNotAllowed,
		http.StatusNotAcceptable, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType,
		http.StatusRequestURITooLong, http.StatusNotImplemented:
		return Invalid
	}
	return Unknown
}

// namespaceTerminating is the cause the apiserver attaches to a Forbidden
// create in a namespace being deleted. It is a state conflict, not an
// authorization failure: a fresh client would be refused just the same.
const namespaceTerminating metav1.CauseType = "NamespaceTerminating"

func kubernetes(err error) (Class, bool) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return "", false
	}
	switch {
	case apierrors.HasStatusCause(err, namespaceTerminating):
		return Conflict, true
	case apierrors.IsNotFound(err), apierrors.IsGone(err):
		return NotFound, true
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return Conflict, true
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return Auth, true
	case apierrors.IsTooManyRequests(err):
		return Throttled, true
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsServiceUnavailable(err):
		return Transport, true
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		return Invalid, true
	case apierrors.IsInternalError(err):
		return Unknown, true
	}
	if cl := HTTPStatus(int(st.Status().Code)); cl != Unknown {
		return cl, true
	}
	return Unknown, true
}

// grpcStatus reads a gRPC status from the error or anything it wraps:
// GRPCStatus() is grpc-go's own accessor; Status() is where Temporal's
// serviceerror types keep theirs (the SDK turns its own call timeout into
// *serviceerror.DeadlineExceeded, whose code is only behind Status()).
func grpcStatus(err error) (Class, bool) {
	var s *status.Status
	var gs interface{ GRPCStatus() *status.Status }
	var ss interface{ Status() *status.Status }
	switch {
	case errors.As(err, &gs):
		s = gs.GRPCStatus()
	case errors.As(err, &ss):
		s = ss.Status()
	}
	if s == nil {
		return "", false
	}
	switch s.Code() {
	case codes.OK:
		return "", false
	case codes.Canceled:
		return Canceled, true
	case codes.Unavailable, codes.DeadlineExceeded:
		return Transport, true
	case codes.Unauthenticated, codes.PermissionDenied:
		return Auth, true
	case codes.NotFound:
		return NotFound, true
	case codes.AlreadyExists, codes.Aborted, codes.FailedPrecondition:
		return Conflict, true
	case codes.ResourceExhausted:
		return Throttled, true
	case codes.InvalidArgument, codes.OutOfRange, codes.Unimplemented:
		return Invalid, true
	}
	return Unknown, true
}

// sqlstate maps exact SQLSTATE codes; classOf maps their two-character
// classes when no exact code matches.
var sqlstate = map[string]Class{
	"57P01": Transport, // admin_shutdown
	"57P02": Transport, // crash_shutdown
	"57P03": Transport, // cannot_connect_now
	"57014": Canceled,  // query_canceled: a cancel request, the connection is fine
	"42501": Auth,      // insufficient_privilege
	"42704": NotFound,  // undefined_object
	"3D000": NotFound,  // invalid_catalog_name (no such database)
	"3F000": NotFound,  // invalid_schema_name
	"42P01": NotFound,  // undefined_table
	"42883": NotFound,  // undefined_function
	"42710": Conflict,  // duplicate_object
	"42P04": Conflict,  // duplicate_database
	"42P06": Conflict,  // duplicate_schema
	"42P07": Conflict,  // duplicate_table
	"23505": Conflict,  // unique_violation
	"55006": Conflict,  // object_in_use
	"55P03": Conflict,  // lock_not_available
	"2BP01": Conflict,  // dependent_objects_still_exist
	"40001": Conflict,  // serialization_failure
	"40P01": Conflict,  // deadlock_detected
	"53300": Throttled, // too_many_connections
}

var sqlclass = map[string]Class{
	"08": Transport, // connection exception
	"28": Auth,      // invalid authorization specification
	"22": Invalid,   // data exception
	"23": Invalid,   // integrity constraint violation
	"42": Invalid,   // syntax error or access rule violation
	"0A": Invalid,   // feature not supported
}

// sqlStater is what PostgreSQL drivers' server errors expose: pgx's
// *pgconn.PgError and lib/pq's *pq.Error both have SQLState().
type sqlStater interface{ SQLState() string }

// pgconnPath is the package of pgx's connection errors. They are
// recognised by type name (reflect), not by type, so that errclass, and
// every module that imports it, does not require pgx.
const pgconnPath = "github.com/jackc/pgx/v5/pgconn"

func postgres(err error) (Class, bool) {
	var ss sqlStater
	if errors.As(err, &ss) {
		code := ss.SQLState()
		if cl, ok := sqlstate[code]; ok {
			return cl, true
		}
		if len(code) == 5 {
			if cl, ok := sqlclass[code[:2]]; ok {
				return cl, true
			}
		}
		return Unknown, true
	}
	var connect bool
	for _, e := range chain(err) {
		switch pgconnType(e) {
		case "ParseConfigError":
			return Invalid, true
		case "connLockError":
			// Wraps pgconn.ErrConnClosed, and nothing else, when the
			// connection is closed; a busy connection wraps nothing.
			if errors.Unwrap(e) != nil {
				return Transport, true
			}
		case "ConnectError":
			connect = true
		}
	}
	// A ConnectError with nothing typed beneath it is still a failed dial.
	if connect && !errors.Is(err, context.DeadlineExceeded) {
		if cl, ok := netError(err); ok {
			return cl, true
		}
		if cl, ok := tlsError(err); ok {
			return cl, true
		}
		return Transport, true
	}
	return "", false
}

// pgconnType is the name of e's type when it is declared in pgx's pgconn
// package, else "".
func pgconnType(e error) string {
	t := reflect.TypeOf(e)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() != pgconnPath {
		return ""
	}
	return t.Name()
}

// chain lists err and everything it wraps, depth first, as errors.As walks
// it; a bounded number of errors, so that a cyclic Unwrap cannot hang a
// classification.
func chain(err error) []error {
	const limit = 64
	var out []error
	stack := []error{err}
	for len(stack) > 0 && len(out) < limit {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == nil {
			continue
		}
		out = append(out, e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			stack = append(stack, u.Unwrap())
		case interface{ Unwrap() []error }:
			es := u.Unwrap()
			for i := len(es) - 1; i >= 0; i-- {
				stack = append(stack, es[i])
			}
		}
	}
	return out
}

// tlsError: a peer whose certificate does not verify (unknown authority,
// another host's name, expired, a constraint or algorithm refused, no
// system roots to verify with) has not proven its identity (Identity): the
// fix is the trust material, or the network path if something in it
// answers with its own certificate. A peer that rejects ours (a TLS alert)
// refuses the client's credential (Auth): the fix is a new client
// certificate. Both are picked up only by a redial. Garbage where a TLS
// record was expected is a transport problem.
func tlsError(err error) (Class, bool) {
	var (
		cve  *tls.CertificateVerificationError
		ua   x509.UnknownAuthorityError
		ci   x509.CertificateInvalidError
		he   x509.HostnameError
		cv   x509.ConstraintViolationError
		ia   x509.InsecureAlgorithmError
		sr   x509.SystemRootsError
		alrt tls.AlertError
		rh   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &cve), errors.As(err, &ua), errors.As(err, &ci), errors.As(err, &he),
		errors.As(err, &cv), errors.As(err, &ia), errors.As(err, &sr):
		return Identity, true
	case errors.As(err, &alrt):
		return Auth, true
	case errors.As(err, &rh):
		return Transport, true
	}
	return "", false
}

func netError(err error) (Class, bool) {
	var (
		dns *net.DNSError
		op  *net.OpError
		ne  net.Error
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ENETDOWN),
		errors.Is(err, syscall.EHOSTDOWN):
		return Transport, true
	case errors.Is(err, net.ErrClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Transport, true
	case errors.As(err, &dns), errors.As(err, &op):
		return Transport, true
	case errors.As(err, &ne) && ne.Timeout():
		return Transport, true
	}
	// Any error that says it is a timeout (net.Error's method alone, which
	// many SDKs' errors implement without being net errors).
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return Transport, true
	}
	return "", false
}

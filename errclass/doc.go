// Package errclass is the one place that decides what an error says about
// the client that returned it: is the client (its connection, its
// credentials) broken, or did a working client get an answer?
//
// Use it wherever an error decides something: Of for the default rules,
// or one Classifier (New) with the rules of a service's own SDK, shared by
// every part of an operator:
//
//	switch errclass.Of(ctx, err) {
//	case errclass.Transport, errclass.Auth: // the client is broken: evict it
//	case errclass.NotFound: // already gone: a delete is done
//	}
//
//	c := errclass.New(func(ctx context.Context, err error) (errclass.Class, bool) {
//		if errors.Is(err, sdk.ErrRateLimited) {
//			return errclass.Throttled, true
//		}
//		return "", false
//	})
//
// # Guarantees
//
//   - Every error maps to exactly one Class; nil maps to "". Classification
//     never panics and is stable under wrapping: fmt.Errorf("...: %w", err)
//     classifies like err, because every rule looks through errors.Is and
//     errors.As, never at message text.
//   - User-supplied Funcs (New) run first, in order; the first that
//     recognises an error wins. The built-in rules are the fallback.
//   - Shutdown never reads as a broken client: context.Canceled is Canceled,
//     and any Transport verdict reached while the call's context is done
//     becomes Canceled, whatever ended it (a shutdown, a cancelled or timed
//     out reconcile, a caller's deadline). A context.DeadlineExceeded from a
//     per-call timeout, while the caller's context is still live, is
//     Transport: that is the seed incident's signature (a half-open
//     connection that answers nothing).
//   - A per-call bound that fires is told apart by its cause: a context done
//     with cause ErrCallTimeout (context.WithTimeoutCause) keeps a Transport
//     verdict Transport. Without it, a caller whose own deadline is shorter
//     than the per-call bound (controller-runtime's ReconciliationTimeout,
//     the last pass of a hold) would turn every hang into Canceled and a
//     client that never closes itself would never be dropped; clientpool
//     sets this cause and makes its bound fire before the caller's.
//
// # Sources
//
// Kubernetes API errors (k8s.io/apimachinery/pkg/api/errors); gRPC status
// codes, read through GRPCStatus() (grpc-go) or Status() (Temporal's
// serviceerror types, the SDK's own call timeout among them); PostgreSQL
// SQLSTATE through SQLState() (pgx's *pgconn.PgError, lib/pq's *pq.Error),
// and pgx's connect, closed-connection and parse errors, recognised by
// their type names so that errclass does not require pgx; any error
// carrying an HTTP status through StatusCode() int (see HTTPStatus); TLS
// and x509 failures; net and syscall errors (refused, reset, broken pipe,
// timeouts, DNS); any error whose Timeout() bool says true; io.EOF and
// io.ErrUnexpectedEOF.
//
// An ecosystem it does not know is taught once: a Func given to New, and
// that Classifier given to the pool (clientpool.Options.Classifier), which
// lifecycle, hold and the sweeper then take from it.
//
// # Decisions
//
// Typed answers (an API status, a gRPC status, an SQLSTATE, an HTTP code)
// are consulted before transport errors, because an answer proves the round
// trip worked. A Forbidden create in a terminating namespace is Conflict,
// not Auth: a fresh client would be refused just the same. A service's
// certificate that does not verify (x509 unknown authority, host name,
// invalid, constraint, insecure algorithm, missing system roots,
// tls.CertificateVerificationError), and a service that offers no TLS
// where it is required (ErrNoTLS, wrapped by the client that knows TLS was
// required), are Identity: the service's end did not prove who it is, and
// the fix is trust material or the network path (something in it may be
// intercepting), never the client's credentials. A TLS alert (the peer
// rejects the client's certificate) is Auth. Both are fixed by something
// only a redial picks up. A non-TLS reply where a TLS record was expected
// is Transport. SQLSTATE
// 57014 (query_canceled) is Canceled: the server honoured a cancel request,
// so the connection works. 42501 (insufficient_privilege) is Auth, like
// gRPC PermissionDenied. Unknown is the honest answer for everything else;
// callers must not treat it as "broken".
package errclass

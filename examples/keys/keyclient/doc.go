// Package keyclient is the Go client of the key service in
// examples/keys/service: keys created with an ownership tag, listed by
// tag, changed, retagged and deleted only while they carry the tag, and
// the identity endpoint that answers finale's ledger.Question.
//
// Every call carries the bearer token given to New. The client never
// follows a redirect, so the token goes to the URL it was made with and
// nowhere else. An answer that is not a success is an *Error carrying the
// HTTP status (package errclass reads it: 401 is Auth, 404 NotFound, 503
// Transport), so a clientpool evicts a client whose token the service
// refuses. Prove returns ErrNotEnrolled, a ledger.ErrNotProven, when the
// service holds no identity for the operator's key.
package keyclient

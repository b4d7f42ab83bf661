package service

import (
	"slices"

	"github.com/finale-dev/finale/ledger"
)

// Key is one API key as the service holds it. The service makes its ID;
// Tag is the caller's ownership tag, which every change and delete must
// name.
type Key struct {
	ID  string `json:"id"`
	Tag string `json:"tag"`
	KeySpec
}

// KeySpec is what a caller sets on a key.
type KeySpec struct {
	// Name is a display name, not unique.
	Name string `json:"name"`
	// Scopes is a set: the service stores it sorted, without duplicates.
	Scopes []string `json:"scopes,omitempty"`
}

// Matches reports whether k holds spec, comparing scopes as the set the
// service keeps.
func (k Key) Matches(spec KeySpec) bool {
	return k.Name == spec.Name && slices.Equal(k.Scopes, NormalizeScopes(spec.Scopes))
}

// NormalizeScopes returns scopes as the service stores them: sorted, each
// once, nil when empty.
func NormalizeScopes(scopes []string) []string {
	if len(scopes) == 0 {
		return nil
	}
	s := slices.Clone(scopes)
	slices.Sort(s)
	return slices.Compact(s)
}

// NewKey is the body of a create.
type NewKey struct {
	Tag string `json:"tag"`
	KeySpec
}

// KeyList is the answer to a list by tag.
type KeyList struct {
	Keys []Key `json:"keys"`
}

// Retag is the body of a retag: the key moves from tag From to tag To.
type Retag struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Identity is the service's deployment ID: the identity of its data,
// made when its data directory was first used.
type Identity struct {
	Deployment string `json:"deployment"`
}

// Enrollment is an identity to store for an operator key ID: the salt and
// the token a ledger.Question's Enroll carries.
type Enrollment struct {
	Salt  string `json:"salt"`
	Token string `json:"token"`
}

// ProveRequest is a ledger.Question on the wire.
type ProveRequest struct {
	KeyID     string      `json:"keyID"`
	Challenge string      `json:"challenge"`
	Tag       string      `json:"tag,omitempty"`
	Enroll    *Enrollment `json:"enroll,omitempty"`
}

// NewProveRequest is q on the wire.
func NewProveRequest(q ledger.Question) ProveRequest {
	r := ProveRequest{KeyID: q.KeyID, Challenge: q.Challenge, Tag: q.Tag}
	if q.Enroll != nil {
		r.Enroll = &Enrollment{Salt: q.Enroll.Salt, Token: q.Enroll.Token}
	}
	return r
}

// Question is r as the ledger asks it (without the enrolment, which only
// the service reads).
func (r ProveRequest) Question() ledger.Question {
	return ledger.Question{KeyID: r.KeyID, Challenge: r.Challenge, Tag: r.Tag}
}

// ProveResponse is a ledger.Answer on the wire.
type ProveResponse struct {
	Deployment string   `json:"deployment"`
	Salt       string   `json:"salt"`
	Tagged     []string `json:"tagged"`
	Response   string   `json:"response"`
}

// Answer is r as the ledger reads it.
func (r ProveResponse) Answer() ledger.Answer {
	return ledger.Answer{Deployment: r.Deployment, Salt: r.Salt, Tagged: r.Tagged, Response: r.Response}
}

// Error is the body of every answer that is not a success.
type Error struct {
	// Code is one of the Code constants.
	Code string `json:"code"`
	// Message says what went wrong, in the service's words.
	Message string `json:"message"`
}

// Error codes.
const (
	CodeUnauthorized = "unauthorized"
	CodeInvalid      = "invalid"
	CodeNotFound     = "not_found"
	// CodeNotEnrolled answers a proof for an operator key ID the service
	// holds no identity for, when the question does not enrol one.
	CodeNotEnrolled = "not_enrolled"
	// CodeUnsupported answers a call the service's Mode does not offer.
	CodeUnsupported = "unsupported"
	CodeInternal    = "internal"
	// CodeUnavailable answers a call that reaches a Server being closed.
	CodeUnavailable = "unavailable"
)

// Messages of the answers that name a Mode's limits.
const (
	MessageNoKey          = "no key has this ID"
	MessageDeleteByIDOnly = "this service deletes by ID only (mode id-only): a delete names no tag"
	MessageNoChallenge    = "this service identifies itself by its deployment ID only (mode id-only): it answers no challenge"
)

// Limits of what the service accepts.
const (
	MaxNameLength  = 100
	MaxTagLength   = 256
	MaxScopes      = 32
	MaxScopeLength = 64
	MaxFieldLength = 256 // key IDs, challenges, salts, tokens
	MaxBodyBytes   = 1 << 20
)

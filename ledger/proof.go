package ledger

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ProofVersion starts every message a deployment answers a challenge over.
const ProofVersion = "finale-proof/v2"

// Question is what the ledger asks a connection to prove. The connection
// must answer it from inside the external service (see Answer): the
// service holds the token, the operator never sends it after enrolment.
type Question struct {
	// KeyID names the operator key the sentinel belongs to, so that two
	// finale installations sharing a service keep separate sentinels.
	KeyID string
	// Challenge is fresh random hex for every question: an answer cannot
	// be replayed, and a connection cannot answer from memory.
	Challenge string
	// Tag asks the service to list, inside the same answer, the IDs of the
	// resources carrying it; "" asks for none. The list is covered by the
	// response, so "nothing carries the tag" is the service's word, not
	// something a proxy in the path can make up.
	Tag string
	// Enroll, when set, is the sentinel a service without one for KeyID
	// must create before answering: the salt and the token it stores.
	// Only the write before a create enrols; the sweeper and Cleanup never
	// do, so a copy or a stranger cannot become a deployment by being
	// asked.
	Enroll *Enrollment
}

// Enrollment is a sentinel to store: the token is derived from the
// operator's key and the salt, so the operator can recompute it from the
// salt recorded in a record and needs no per-deployment state.
type Enrollment struct {
	Salt  string
	Token string
}

// Answer is a service's reply to a Question, computed inside the service.
type Answer struct {
	// Deployment is the service's own stable identifier of its data (a
	// PostgreSQL system_identifier, say), read inside the answer.
	Deployment string
	// Salt is the stored sentinel's salt for the question's KeyID.
	Salt string
	// Tagged are the IDs carrying the question's Tag.
	Tagged []string
	// Response is Respond(token, question, Deployment, Salt, Tagged),
	// computed where the token is stored.
	Response string
}

// Prover answers Questions from inside the external service. An adapter
// implements it with one round trip per call: an answer must never come
// from a cache, because it is what proves that the deployment is there and
// what it holds now.
type Prover interface {
	Prove(ctx context.Context, q Question) (Answer, error)
}

// ProverFunc adapts a function to Prover.
type ProverFunc func(ctx context.Context, q Question) (Answer, error)

// Prove calls f.
func (f ProverFunc) Prove(ctx context.Context, q Question) (Answer, error) { return f(ctx, q) }

// Respond is the response a service holding token gives to q for the
// deployment, salt and tagged IDs it reports: hex SHA-256 over a message of
// length-prefixed fields, with tagged IDs sorted bytewise.
//
// A service that computes it elsewhere (in SQL, say) must produce exactly
// this; ResponseMessage shows the message. Each field is written as
// "\n" + its length in bytes + ":" + the field, so no field can run into
// the next.
func Respond(token string, q Question, deployment, salt string, tagged []string) string {
	sum := sha256.Sum256([]byte(ResponseMessage(token, q, deployment, salt, tagged)))
	return hex.EncodeToString(sum[:])
}

// ResponseMessage is the message Respond hashes.
func ResponseMessage(token string, q Question, deployment, salt string, tagged []string) string {
	var b strings.Builder
	b.WriteString(ProofVersion)
	for _, f := range []string{token, q.KeyID, q.Challenge, deployment, salt, q.Tag} {
		field(&b, f)
	}
	ids := slices.Clone(tagged)
	slices.Sort(ids)
	for _, id := range ids {
		field(&b, id)
	}
	return b.String()
}

func field(b *strings.Builder, s string) {
	b.WriteByte('\n')
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
}

// KeySize is the minimum length of a Key.
const KeySize = 32

// Key is the operator's secret: it authenticates records (a record it did
// not sign is never acted on) and derives the tokens deployments hold. Keep
// it in a Secret only the operator reads (LoadKey); lose it and every
// record becomes unverifiable, which is safe (nothing is deleted) but needs
// a human.
type Key struct {
	b []byte
}

// ErrKey wraps every problem with a key.
var ErrKey = errors.New("ledger: operator key")

// NewKey checks b and returns it as a Key.
func NewKey(b []byte) (Key, error) {
	if len(b) < KeySize {
		return Key{}, fmt.Errorf("%w: %d bytes, need at least %d random bytes", ErrKey, len(b), KeySize)
	}
	return Key{b: slices.Clone(b)}, nil
}

// GenerateKey returns a new random key.
func GenerateKey() Key {
	b := make([]byte, KeySize)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return Key{b: b}
}

func (k Key) valid() bool { return len(k.b) >= KeySize }

// String never shows the key.
func (k Key) String() string { return "ledger.Key(redacted)" }

// GoString never shows the key.
func (k Key) GoString() string { return k.String() }

// ID is a short public name of the key: what sentinels are stored under.
func (k Key) ID() string { return hex.EncodeToString(k.mac("finale-key-id/v2")[:8]) }

// mac is HMAC-SHA256 under k over length-prefixed parts.
func (k Key) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, k.b)
	var b strings.Builder
	for _, p := range parts {
		field(&b, p)
	}
	m.Write([]byte(b.String()))
	return m.Sum(nil)
}

// Token is the token a deployment enrolled with salt holds.
func (k Key) Token(salt string) string { return hex.EncodeToString(k.mac("finale-token/v2", salt)) }

// enrollment makes a fresh sentinel for a deployment that has none.
func (k Key) enrollment() *Enrollment {
	salt := randomHex(16)
	return &Enrollment{Salt: salt, Token: k.Token(salt)}
}

// question returns a fresh question about tag.
func (k Key) question(tag string) Question {
	return Question{KeyID: k.ID(), Challenge: randomHex(32), Tag: tag}
}

// verify checks that a answers q for a deployment enrolled with salt: the
// response must be what the token derived from salt gives. salt is the
// record's, never the answer's, once a record exists.
func (k Key) verify(q Question, a Answer, salt string) bool {
	if a.Salt != salt || a.Deployment == "" || salt == "" {
		return false
	}
	want := Respond(k.Token(salt), q, a.Deployment, salt, a.Tagged)
	return hmac.Equal([]byte(want), []byte(a.Response))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

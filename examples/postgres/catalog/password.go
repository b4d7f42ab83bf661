package catalog

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
)

// redacted is what a Password prints as.
const redacted = "[redacted]"

// Password is a role's password. It prints as "[redacted]" with every fmt
// verb and marshals to "[redacted]", so logging a RoleSpec, or an error that
// quotes one, cannot leak it.
//
// It never reaches the server in clear either: the catalog sends a
// SCRAM-SHA-256 verifier computed here, so the statement (which the server
// may log with log_statement or in an error report) carries only the
// verifier, the same thing pg_authid stores.
type Password string

// String redacts the password.
func (Password) String() string { return redacted }

// GoString redacts the password.
func (Password) GoString() string { return redacted }

// Format redacts the password whatever the verb.
func (Password) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// MarshalJSON redacts the password.
func (Password) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText redacts the password.
func (Password) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// MaxPasswordLen bounds a password.
const MaxPasswordLen = 1024

// scramIterations is PostgreSQL's default scram_iterations.
const scramIterations = 4096

// validate refuses what cannot be hashed to the verifier PostgreSQL would
// compute. PostgreSQL prepares a password with SASLprep before hashing;
// printable ASCII is left unchanged by it, so restricting to it makes the
// client-side verifier exact. It also catches the common trailing newline of
// a Secret written with echo.
func (p Password) validate(name string) error {
	if len(p) > MaxPasswordLen {
		return &Error{Reason: ReasonInvalid, Kind: KindRole, Name: name, Detail: fmt.Sprintf("the password is longer than %d bytes", MaxPasswordLen)}
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c > 0x7e {
			return &Error{Reason: ReasonInvalid, Kind: KindRole, Name: name, Detail: fmt.Sprintf("the password has a byte outside printable ASCII at offset %d (a trailing newline in the Secret is a common cause); use printable ASCII only", i)}
		}
	}
	return nil
}

// verifier is the SCRAM-SHA-256 verifier of p with a fresh random salt, in
// the form pg_authid.rolpassword stores (RFC 5803).
func (p Password) verifier() (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	salted, err := pbkdf2.Key(sha256.New, string(p), salt, scramIterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("password verifier: %w", err)
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	server := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(stored[:]), b64(server)), nil
}

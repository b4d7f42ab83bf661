package service

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/finale-dev/finale/ledger"
)

// MinTokenLength is the shortest bearer token New accepts.
const MinTokenLength = 16

// Options configure New.
type Options struct {
	// Token is the bearer token every call must carry. Required, at least
	// MinTokenLength bytes.
	Token string
	// Dir holds the service's data: its deployment ID and its keys.
	// Required; created when missing. A directory used for the first time
	// is a new deployment.
	Dir string
	// IdentityDir holds the identities operators enrolled (a salt and a
	// token per operator key ID); "" is Dir. Kept apart, a copy of Dir
	// without it (a backup restored elsewhere, a clone for tests) holds the
	// same deployment ID and keys but cannot prove the deployment: it has
	// no token to answer with. Unused in ModeIDOnly, which has no
	// identities.
	IdentityDir string
	// Mode is the shape of the API: "" is ModeChallenge, the default.
	Mode Mode
}

// Mode is the shape of the service's API in the two places finale's
// guarantees depend on: how it proves its deployment and how it deletes.
type Mode string

const (
	// ModeChallenge is the default: the service answers the ledger's
	// challenge with a token only it holds (POST /v1/identity/prove), and
	// deletes a key only while it carries the tag the delete names, in one
	// request.
	ModeChallenge Mode = "challenge"
	// ModeIDOnly is the shape of the service in the G2 seed (coder-k8s):
	// it identifies itself by its deployment ID alone (GET /v1/identity;
	// the challenge endpoint answers 501), which a copy of its data or
	// anything that relays it answers identically, and deletes by exact
	// ID alone (DELETE /v1/keys/{id} refuses a tag and answers 404 for a
	// missing key), so a caller that must delete only its own key reads it
	// first (GET /v1/keys/{id}) and deletes in a second request.
	ModeIDOnly Mode = "id-only"
)

// ParseMode returns the Mode named s; "" is ModeChallenge.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "", ModeChallenge:
		return ModeChallenge, nil
	case ModeIDOnly:
		return m, nil
	}
	return "", fmt.Errorf("%w: %q is neither %q nor %q", ErrMode, s, ModeChallenge, ModeIDOnly)
}

// ErrMode wraps an unknown Options.Mode.
var ErrMode = errors.New("service: unknown mode")

// Service is the key service: an http.Handler. It is safe for concurrent
// use; every change is written to disk before it is answered.
type Service struct {
	token      []byte
	keysPath   string
	idsPath    string
	deployment string // read-only after New
	mode       Mode   // read-only after New

	mu         sync.Mutex            // guards keys and identities
	keys       map[string]Key        // by ID
	identities map[string]Enrollment // by operator key ID

	mux *http.ServeMux
}

// New opens (or starts) the service's data in o.Dir and o.IdentityDir.
func New(o Options) (*Service, error) {
	if len(o.Token) < MinTokenLength {
		return nil, fmt.Errorf("service: Options.Token has %d bytes, need at least %d", len(o.Token), MinTokenLength)
	}
	if o.Dir == "" {
		return nil, errors.New("service: Options.Dir is required")
	}
	mode, err := ParseMode(string(o.Mode))
	if err != nil {
		return nil, err
	}
	if o.IdentityDir == "" {
		o.IdentityDir = o.Dir
	}
	for _, d := range []string{o.Dir, o.IdentityDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("service: %w", err)
		}
	}
	s := &Service{
		token:      []byte(o.Token),
		keysPath:   filepath.Join(o.Dir, KeysFile),
		idsPath:    filepath.Join(o.IdentityDir, IdentitiesFile),
		keys:       map[string]Key{},
		identities: map[string]Enrollment{},
		mode:       mode,
	}
	if s.deployment, err = loadDeployment(o.Dir); err != nil {
		return nil, err
	}
	var kf keysFile
	if err := readJSON(s.keysPath, &kf); err != nil {
		return nil, err
	}
	for _, k := range kf.Keys {
		s.keys[k.ID] = k
	}
	var idf identitiesFile
	if err := readJSON(s.idsPath, &idf); err != nil {
		return nil, err
	}
	maps.Copy(s.identities, idf.Identities)

	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/keys", s.create)
	s.mux.HandleFunc("GET /v1/keys", s.list)
	s.mux.HandleFunc("GET /v1/keys/{id}", s.get)
	s.mux.HandleFunc("PUT /v1/keys/{id}", s.update)
	s.mux.HandleFunc("POST /v1/keys/{id}/retag", s.retag)
	s.mux.HandleFunc("GET /v1/identity", s.identity)
	if mode == ModeIDOnly {
		s.mux.HandleFunc("DELETE /v1/keys/{id}", s.deleteByID)
		s.mux.HandleFunc("POST /v1/identity/prove", s.unsupported)
	} else {
		s.mux.HandleFunc("DELETE /v1/keys/{id}", s.delete)
		s.mux.HandleFunc("POST /v1/identity/prove", s.prove)
	}
	return s, nil
}

// Mode is the shape of the service's API.
func (s *Service) Mode() Mode { return s.mode }

// Deployment is the service's deployment ID.
func (s *Service) Deployment() string { return s.deployment }

// Keys returns every key the service holds, by ID: what an operator's
// test counts as leaked. The HTTP API lists by tag only.
func (s *Service) Keys() []Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Collect(maps.Values(s.keys))
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// ServeHTTP checks the bearer token, then serves the API.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), s.token) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="keys"`)
		fail(w, http.StatusUnauthorized, CodeUnauthorized, "a valid bearer token is required")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	s.mux.ServeHTTP(w, r)
}

func (s *Service) create(w http.ResponseWriter, r *http.Request) {
	var in NewKey
	if !decode(w, r, &in) || !validTag(w, in.Tag) || !validSpec(w, in.KeySpec) {
		return
	}
	k := Key{ID: "ak_" + randomHex(12), Tag: in.Tag, KeySpec: KeySpec{Name: in.Name, Scopes: NormalizeScopes(in.Scopes)}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.saveKeys(w, func(keys map[string]Key) { keys[k.ID] = k }) {
		return
	}
	reply(w, http.StatusCreated, k)
}

func (s *Service) list(w http.ResponseWriter, r *http.Request) {
	tag := r.URL.Query().Get("tag")
	if !validTag(w, tag) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := KeyList{Keys: []Key{}}
	for _, k := range s.keys {
		if k.Tag == tag {
			out.Keys = append(out.Keys, k)
		}
	}
	slices.SortFunc(out.Keys, func(a, b Key) int { return strings.Compare(a.ID, b.ID) })
	reply(w, http.StatusOK, out)
}

// update changes the key with the ID only while it carries the tag.
func (s *Service) update(w http.ResponseWriter, r *http.Request) {
	tag := r.URL.Query().Get("tag")
	var spec KeySpec
	if !validTag(w, tag) || !decode(w, r, &spec) || !validSpec(w, spec) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[r.PathValue("id")]
	if !ok || k.Tag != tag {
		fail(w, http.StatusNotFound, CodeNotFound, "no key with this ID carries this tag")
		return
	}
	k.KeySpec = KeySpec{Name: spec.Name, Scopes: NormalizeScopes(spec.Scopes)}
	if !s.saveKeys(w, func(keys map[string]Key) { keys[k.ID] = k }) {
		return
	}
	reply(w, http.StatusOK, k)
}

// delete deletes the key with the ID only while it carries the tag. No
// key with that ID carrying the tag (gone, never made, someone else's) is
// success: the key the caller means does not exist.
func (s *Service) delete(w http.ResponseWriter, r *http.Request) {
	tag := r.URL.Query().Get("tag")
	if !validTag(w, tag) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[r.PathValue("id")]; ok && k.Tag == tag {
		if !s.saveKeys(w, func(keys map[string]Key) { delete(keys, k.ID) }) {
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// get answers the key with the ID, whatever its tag: the read of
// ModeIDOnly's read-then-delete.
func (s *Service) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	k, ok := s.keys[r.PathValue("id")]
	s.mu.Unlock()
	if !ok {
		fail(w, http.StatusNotFound, CodeNotFound, MessageNoKey)
		return
	}
	reply(w, http.StatusOK, k)
}

// deleteByID is ModeIDOnly's delete: the key with the ID goes, whatever it
// carries; a missing key is a 404. A tag is refused rather than ignored, so
// that a client that means a conditional delete learns it is not getting
// one.
func (s *Service) deleteByID(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("tag") {
		fail(w, http.StatusBadRequest, CodeInvalid, MessageDeleteByIDOnly)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[r.PathValue("id")]
	if !ok {
		fail(w, http.StatusNotFound, CodeNotFound, MessageNoKey)
		return
	}
	if !s.saveKeys(w, func(keys map[string]Key) { delete(keys, k.ID) }) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// unsupported answers ModeIDOnly's challenge endpoint: the service holds
// no token and proves nothing.
func (s *Service) unsupported(w http.ResponseWriter, _ *http.Request) {
	fail(w, http.StatusNotImplemented, CodeUnsupported, MessageNoChallenge)
}

// retag moves the key with the ID from one tag to another; a key that
// already carries the new tag, or carries neither, is left as it is.
func (s *Service) retag(w http.ResponseWriter, r *http.Request) {
	var in Retag
	if !decode(w, r, &in) || !validTag(w, in.From) || !validTag(w, in.To) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[r.PathValue("id")]; ok && k.Tag == in.From {
		k.Tag = in.To
		if !s.saveKeys(w, func(keys map[string]Key) { keys[k.ID] = k }) {
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) identity(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, Identity{Deployment: s.deployment})
}

// prove answers a ledger.Question where the identity's token is kept: the
// token is read here and never sent. A question that enrols stores its
// salt and token only when the key ID has no identity yet (enrol once),
// so a later enrolment can never replace the identity records were
// written against.
func (s *Service) prove(w http.ResponseWriter, r *http.Request) {
	var in ProveRequest
	if !decode(w, r, &in) {
		return
	}
	for _, f := range []string{in.KeyID, in.Challenge} {
		if f == "" || len(f) > MaxFieldLength {
			fail(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("keyID and challenge must be 1 to %d bytes", MaxFieldLength))
			return
		}
	}
	if in.Tag != "" && !validTag(w, in.Tag) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.identities[in.KeyID]
	if !ok && in.Enroll != nil {
		e := *in.Enroll
		if e.Salt == "" || e.Token == "" || len(e.Salt) > MaxFieldLength || len(e.Token) > MaxFieldLength {
			fail(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("enroll needs a salt and a token of 1 to %d bytes", MaxFieldLength))
			return
		}
		if !s.saveIdentity(w, in.KeyID, e) {
			return
		}
		id, ok = e, true
	}
	if !ok {
		fail(w, http.StatusConflict, CodeNotEnrolled, "no identity is enrolled for this operator key ID")
		return
	}
	out := ProveResponse{Deployment: s.deployment, Salt: id.Salt, Tagged: []string{}}
	if in.Tag != "" {
		for _, k := range s.keys {
			if k.Tag == in.Tag {
				out.Tagged = append(out.Tagged, k.ID)
			}
		}
		slices.Sort(out.Tagged)
	}
	out.Response = ledger.Respond(id.Token, in.Question(), out.Deployment, out.Salt, out.Tagged)
	reply(w, http.StatusOK, out)
}

// saveKeys applies change to a copy of the keys, writes the copy to disk
// and only then makes it the service's: a write that fails changes
// nothing. Called with mu held.
func (s *Service) saveKeys(w http.ResponseWriter, change func(map[string]Key)) bool {
	next := maps.Clone(s.keys)
	change(next)
	f := keysFile{Keys: slices.Collect(maps.Values(next))}
	slices.SortFunc(f.Keys, func(a, b Key) int { return strings.Compare(a.ID, b.ID) })
	if err := writeJSON(s.keysPath, f); err != nil {
		fail(w, http.StatusInternalServerError, CodeInternal, "the keys could not be written to disk")
		return false
	}
	s.keys = next
	return true
}

// saveIdentity stores an identity as saveKeys stores keys. Called with mu
// held.
func (s *Service) saveIdentity(w http.ResponseWriter, keyID string, e Enrollment) bool {
	next := maps.Clone(s.identities)
	next[keyID] = e
	if err := writeJSON(s.idsPath, identitiesFile{Identities: next}); err != nil {
		fail(w, http.StatusInternalServerError, CodeInternal, "the identity could not be written to disk")
		return false
	}
	s.identities = next
	return true
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	d := json.NewDecoder(r.Body)
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		fail(w, http.StatusBadRequest, CodeInvalid, "the body is not the JSON this call takes: "+err.Error())
		return false
	}
	return true
}

func validTag(w http.ResponseWriter, tag string) bool {
	if tag == "" || len(tag) > MaxTagLength {
		fail(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("a tag of 1 to %d bytes is required", MaxTagLength))
		return false
	}
	return true
}

func validSpec(w http.ResponseWriter, spec KeySpec) bool {
	ok := spec.Name != "" && len(spec.Name) <= MaxNameLength && len(spec.Scopes) <= MaxScopes
	for _, sc := range spec.Scopes {
		ok = ok && sc != "" && len(sc) <= MaxScopeLength
	}
	if !ok {
		fail(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("a key needs a name of 1 to %d bytes and at most %d scopes of 1 to %d bytes", MaxNameLength, MaxScopes, MaxScopeLength))
	}
	return ok
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	reply(w, status, Error{Code: code, Message: msg})
}

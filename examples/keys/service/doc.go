// Package service is a small HTTP API-key service, finale's own, for the
// second worked example (examples/keys): the external service an operator
// on finale manages. It listens on loopback only (Start, CheckLoopback)
// and keeps its data in files.
//
// # API
//
// Every call carries "Authorization: Bearer <token>" (Options.Token);
// anything else is 401. Bodies are JSON; errors are an Error with a code.
//
//	POST   /v1/keys                  NewKey -> 201 Key (the service makes the ID)
//	GET    /v1/keys?tag=T            -> 200 KeyList: the keys carrying T
//	GET    /v1/keys/{id}             -> 200 Key, whatever its tag; 404 not_found
//	PUT    /v1/keys/{id}?tag=T       KeySpec -> 200 Key; 404 unless key id carries T
//	DELETE /v1/keys/{id}?tag=T       -> 204: deleted, or no key id carries T
//	POST   /v1/keys/{id}/retag       Retag -> 204: moved from From to To, if it carried From
//	GET    /v1/identity              -> 200 Identity: the deployment ID, as claimed
//	POST   /v1/identity/prove        ProveRequest -> 200 ProveResponse; 409 not_enrolled
//
// A key's tag is its owner's (an operator's ownership tag): a change or a
// delete names it, and a key that does not carry it is left alone. A
// delete of a key that does not carry the tag is success, because the key
// the caller means (that ID carrying that tag) does not exist.
//
// # Identity without a sentinel table
//
// The service has no place where a client could keep a sentinel of its
// own (no table, no free-form resource). It offers an identity endpoint
// instead. The deployment ID is made when a data directory is first used
// and kept in it. A ProveRequest (finale's ledger.Question on the wire)
// that carries an enrolment, for an operator key ID the service holds no
// identity for, stores its salt and token: enrolment happens once and a
// later one never replaces it. Every proof is answered here: the service
// reads the identity's token and computes ledger.Respond over the
// question, its deployment ID, the salt and the IDs of the keys carrying
// the question's tag. The token never leaves the service after enrolment,
// and the list of tagged keys is covered by the response, so a proxy in
// the path can neither claim "nothing left" nor answer for another
// service.
//
// Identities live in Options.IdentityDir, apart from the keys when it is
// set. A copy of the data directory (a backup restored elsewhere) or a
// service reset to an empty identity store has the deployment ID and the
// keys, but no token: it answers 409 not_enrolled, and an operator's
// cleanup through it is refused (DeploymentNotProven) rather than taking
// its empty answers for a finished delete.
//
// # The seed's shape: ModeIDOnly
//
// Options.Mode ModeIDOnly gives the service the shape of the one in the
// G2 seed (coder-k8s): it proves nothing, since it keeps no identities and
// its challenge endpoint answers 501 unsupported, so the only identity it
// offers is its deployment ID, read from GET /v1/identity, which a copy
// of its data answers identically; and it deletes by exact ID alone:
//
//	DELETE /v1/keys/{id}             -> 204 deleted, whatever its tag; 404 not_found; 400 with a tag
//
// A caller that must delete only its own key reads it first and deletes
// in a second request: whatever changes between the two (the key moved
// to another tag, the requests reaching two backends) is not seen.
// Creates, lists, updates and retags are as in the default mode.
// examples/keys/README.md tabulates which of finale's guarantees still
// hold for an operator of a service of this shape.
//
// # Durability
//
// Every change is written to disk (a temporary file renamed over the old
// one) before it is answered; a write that fails changes nothing and is a
// 500. A data directory with keys but no deployment ID is refused rather
// than given a new ID over old keys.
package service

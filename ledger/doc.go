// Package ledger keeps write-ahead cleanup records: one per owner object that
// creates something outside the cluster, written before the create, holding
// no secret, and removed only after the external delete is confirmed in the
// deployment the resources were created in.
//
// # Guarantees
//
//   - No record, no create. Ledger.Create writes (or refreshes) the record
//     and calls the caller's create function only if that write succeeded;
//     a failed write returns ErrRecordWrite and nothing external happens.
//   - No duplicate after a lost answer. Before creating, Create looks for
//     resources already carrying the owner's ownership tag (Tag) and adopts
//     them, so a crash between the external create and recording its IDs is
//     resolved by the next reconcile without a human.
//   - Identity from the service, never from users. Create, Observe and
//     Cleanup read the deployment identity from the connection (Identifier)
//     themselves; no API takes a deployment name from the caller.
//   - One deployment per record. Create and Observe refuse (ErrNotProven) a
//     connection that does not prove the record's deployment, including for
//     a record that has no IDs yet (seed follow-up 7): what exists in the
//     old deployment must be cleaned up there first.
//   - Newer attempt, rewritten record. Observe rewrites the record when the
//     attempt time is newer than the recorded one even if the IDs did not
//     change (seed follow-up 9), so a settle window never counts from an
//     older attempt. IDs are only ever added. Create stamps the attempt
//     time in the write before the external create, which is that rewrite
//     for its own attempt: the write after the create only adds IDs.
//   - Declared IDs. CreateDeclared puts IDs the caller knows before the
//     create into that same write, so a create returning exactly them needs
//     no second write (a Role's lifecycle: two record writes, not three);
//     an ID the create returns that was not declared is still recorded
//     after it. A declared ID whose create never succeeded stays recorded
//     (IDs are only ever added, and a create whose answer was lost may have
//     made it), so declare only IDs whose Delete checks the ownership tag:
//     deleting one that does not exist is success.
//   - Confirmed delete, then removal. Cleanup proves the deployment, deletes
//     every recorded ID and every tagged resource, proves the deployment again
//     (the proof and the deletes are separate requests that may reach
//     different backends during a switch, seed follow-up 6), checks that no
//     tagged resource remains, and only then removes the record, conditional
//     on its resourceVersion.
//   - Invalid records are left alone: a record that does not decode, has an
//     unknown schema version, or was edited into an inconsistent state
//     (ErrInvalidRecord) is never acted on and never removed by this package.
//
// # Records
//
// The default Store keeps one ConfigMap per record in the operator's own
// namespace (NewConfigMapStore; "" means $POD_NAMESPACE, and no namespace at
// all is an error rather than a silent default), never in the owner's: a
// terminating namespace refuses new objects and a namespace deletion would
// take the record with it. The ConfigMap is named finale-cleanup-<owner uid>
// and labelled finale.dev/cleanup-record=v1, finale.dev/kind=<lower-case kind>
// and finale.dev/deployment=<DeploymentLabel>. Its data has one key per field
// (schema version, owner apiVersion/kind/namespace/name/uid, deployment,
// deployment proof, tag, external IDs as a JSON array, created-at, last
// create attempt), so an admin can read it with kubectl. Updates are
// conditional on resourceVersion. Store is a four-method interface so that a
// CRD-backed store can follow.
//
// Writes read only when they must. The write before a create first tries
// to create the record (conditional on there being none: AlreadyExists is a
// conflict) and reads only after that conflict; the write after the create
// starts from the version the first write returned and reads only after a
// conflict. A record changed meanwhile is therefore never overwritten: its
// newer version makes the conditional write fail, and the retry reads it.
// Cleanup still reads the record first, because the recorded IDs are what
// it must delete.
//
// The ownership tag is "finale:<lower-case kind>:<owner uid>". It is
// deterministic (a retry computes the same tag) and unique to the object (it
// contains the UID, so a recreated object with the same name gets another).
// Deletion by tag never uses a user-chosen name.
//
// # Deployment proof
//
// A connection's Identity is a deployment ID plus a proof token that only the
// genuine deployment holds (for example a sentinel row the operator created
// there on first contact). A record stores the deployment ID and Commit, a
// SHA-256 commitment to ID and token, never the token: reading records does
// not let anyone impersonate the deployment. See package sweep for the threat
// model.
//
// # Secrets
//
// A record holds kind, owner UID, namespace/name, deployment ID, the
// commitment, the tag, external IDs and two times; nothing read from a Secret
// and not the proof token. Identity.String redacts the token.
//
// # Access
//
// Only the operator's ServiceAccount may write the record ConfigMaps: see
// config/rbac (a Role and RoleBinding in the operator's namespace; the
// user-facing ClusterRole grants nothing on ConfigMaps).
package ledger

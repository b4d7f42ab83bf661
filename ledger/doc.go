// Package ledger keeps write-ahead cleanup records: one per owner object that
// creates something outside the cluster, written before the create, signed
// with the operator's key, holding no secret, and removed only after the
// deployment the resources were created in says, from inside, that none
// remains.
//
// Use it around every external create and delete of an owner: load the
// operator key, make a Ledger on the records namespace, and let Create call
// the create only once the record is written:
//
//	store, err := ledger.NewConfigMapStore(c, "") // $POD_NAMESPACE
//	key, err := ledger.LoadKey(ctx, c, store.Namespace(), "")
//	l, err := ledger.New(store, ledger.Options{Key: key})
//	rec, err := l.Create(ctx, ledger.Plan{Owner: owner, Policy: ledger.PolicyDelete}, conn,
//		func(ctx context.Context, tag string) ([]string, error) {
//			id, err := svc.Create(ctx, name, tag) // tagged with the owner
//			return []string{id}, err
//		})
//
// On deletion, Cleanup deletes through a Target and removes the record only
// once the deployment says nothing tagged remains. Package lifecycle does
// all of this for a kind wired with Setup.
//
// # Guarantees
//
//   - No record, no create. Ledger.Create writes (or refreshes) the record
//     and calls the caller's create function only if that write succeeded;
//     a failed write returns ErrRecordWrite and nothing external happens.
//   - No duplicate after a lost answer. The proof before the write lists
//     what already carries the owner's ownership tag (Tag); Create adopts
//     it instead of creating, so a crash between the external create and
//     recording its IDs is resolved by the next reconcile without a human.
//   - No create lands unrecorded. An attempt whose outcome this ledger did
//     not see (its client gave up, the operator stopped during it) may
//     still complete in the service for Options.CreateTimeout plus
//     Options.CreateLanding after it; until then Create does not create
//     again and Cleanup does not remove the record (both return an
//     *InDoubtError, ErrCreateInDoubt), unless the service already lists a
//     resource carrying the tag. An attempt answered (a success, a refusal,
//     ErrNotSent) is not in doubt; after a restart every recent one is.
//     What a service completes later than CreateLanding, or a network path
//     delivers later, is out of reach: give the service a bound below it.
//   - Identity from the service, proven, never claimed. A connection proves
//     its deployment by answering a fresh Question from inside the service
//     (Prover, Respond): the answer is a hash over the deployment's token,
//     the challenge, the deployment's own identity and the IDs carrying the
//     tag. The token is derived from the operator's Key and a salt
//     (Key.Token); the service holds it (enrolled once, the only time it
//     crosses the wire), records hold only the salt. No API takes a
//     deployment name from the caller.
//   - One deployment per record. Create and Observe refuse (ErrNotProven) a
//     connection that does not prove the record's deployment, including for
//     a record that has no IDs yet: what exists in the old deployment must be
//     cleaned up there first. The error says which part differs (the
//     deployment, its sentinel, or an answer that does not verify).
//   - Authenticated records. Every record carries an HMAC over all its
//     fields under the operator's key. A record that does not verify
//     (ErrUnauthenticated, which is an ErrInvalidRecord) was edited, forged,
//     or written by another installation: it is reported and never acted on
//     or removed by this package.
//   - The policy travels with the record. Plan.Policy (Delete or Retain) is
//     written with the record and kept up to date (Ensure), so the sweeper
//     knows to keep a Retain owner's resources; Plan.Via names the
//     connection object the resources were created through, the one
//     connection besides an admin's that the sweeper may use.
//   - Lost records are written again. Ensure, called for a live owner whose
//     resources exist, writes a record that vanished out of band (after a
//     proof), and updates policy and connection when they changed.
//   - Adoption across UIDs, bound to more than names. Adopt moves a record
//     to an object of the same kind, namespace and name with another UID
//     (a restore, a GitOps rebuild), after a proof, retagging every
//     resource before removing the old record. The claimer's connection
//     object must have the name (and kind) of the record's (Record.Via;
//     ErrOtherConnection), and its namespace must be the very namespace the
//     record was written in (Record.NamespaceUID): a namespace deleted and
//     created again under its name is somebody else's until an admin
//     approves this one object (AnnotationApproval; ErrNeedsApproval), or
//     every object of a restored namespace at once
//     (ConfigMapStore.ApproveNamespace, `finale approve`: the same
//     approval on each record written in that namespace while it had the
//     given earlier UID, for the object of the owner's kind and name that
//     claims it). Record.ClaimApproved is the one predicate, which the
//     sweeper uses to bound unapproved claims.
//     Every step may be repeated: while the old record exists the adoption
//     is unfinished, and Adopt resumes it.
//   - Retained, not forgotten. Keep marks a Retain owner's record Retain
//     and leaves it, so that a restored owner can adopt what was kept; the
//     sweeper never deletes through it (package sweep).
//   - The previous layout migrated, never trusted. A record of schema 1
//     (unsigned; ErrLegacyRecord) is rewritten, signed, by Migrate for a
//     live owner its caller vouches for, through that owner's connection:
//     the deployment must prove itself (enrolling the operator key's
//     sentinel, which the previous release never made) and be the one the
//     old record names, and the IDs recorded are those the deployment says
//     carry the owner's tag, not those the old record lists. Create and
//     Ensure migrate on their way; nothing else acts on such a record.
//   - Newer attempt, rewritten record; clocks never run back. The attempt
//     time is set in the write before the create, and a replica whose clock
//     is behind the recorded attempt keeps it rather than moving it back.
//   - Declared IDs. Plan.Declared puts IDs the caller knows before the create
//     into that same write, so a create returning exactly them needs no
//     second write, and a create interrupted before it could tag anything
//     still leaves its name recorded. Declare only IDs whose Delete checks
//     the tag.
//   - Confirmed delete, then removal. Cleanup proves the deployment (and
//     learns what carries the tag), deletes every recorded ID and every
//     tagged resource, proves again with a fresh challenge, whose answer
//     must list nothing carrying the tag (the deletes may have gone
//     elsewhere: a switch-over, a proxy splicing the session), and only then
//     removes the record, conditional on its resourceVersion.
//
// # Records
//
// The default Store keeps one ConfigMap per record in the operator's own
// namespace (NewConfigMapStore; "" means $POD_NAMESPACE, and no namespace at
// all is an error rather than a silent default), never in the owner's: a
// terminating namespace refuses new objects and a namespace deletion would
// take the record with it. The ConfigMap is named finale-cleanup-<owner uid>
// and labelled finale.dev/cleanup-record=v2 (List selects on the label
// whatever its value, so a record of an older layout is reported rather
// than missed), finale.dev/kind=<lower-case kind> and
// finale.dev/deployment=<DeploymentLabel>. Its data has one key per field
// (schema version, owner apiVersion/kind/namespace/name/uid, the owner's
// namespace UID, deletion policy, connection, deployment, salt, tag,
// external IDs as a JSON array, created-at, last create attempt, MAC), so
// an admin can read it with kubectl. A field added to the layout after
// records v2 shipped (the namespace UID) is written and signed only when
// set, so records written before it still read back and authenticate
// (testdata/record-v2.json). The one annotation the ledger reads,
// AnnotationApproval, is an admin's, not signed: see Adopt. Updates are
// conditional on resourceVersion. Store is a four-method interface so that
// a CRD-backed store can follow.
//
// Records of the previous release (schema 1, label value v1,
// testdata/record-v1.json: no signature, no policy, no salt, a commitment
// to a token the operator read from the service) decode as ErrLegacyRecord,
// an ErrInvalidRecord: reported, never acted on, until Migrate rewrites
// one for its live owner. One whose owner is gone stays invalid: nothing
// vouches for an unsigned record, and an admin cleans up by hand.
//
// Writes read only when they must. The write before a create first tries
// to create the record (conditional on there being none: AlreadyExists is a
// conflict) and reads only after that conflict; the write after the create
// starts from the version the first write returned and reads only after a
// conflict. A record changed meanwhile is therefore never overwritten: its
// newer version makes the conditional write fail, and the retry reads it.
//
// The ownership tag is "finale:<lower-case kind>:<owner uid>" (ParseTag
// reads it back). It is deterministic (a retry computes the same tag) and
// unique to the object (it contains the UID, so a recreated object with the
// same name gets another). Deletion by tag never uses a user-chosen name.
//
// # The operator key
//
// LoadKey reads the key from a Secret in the operator's namespace, creating
// it on first start. It signs records and derives sentinel tokens; losing it
// makes every record unverifiable and every deployment unproven, which is
// safe (nothing is deleted, everything is reported) but needs a human:
// back it up with the records. Key.ID names it in sentinels, so two
// installations sharing a service keep separate ones.
//
// # Services without a place for a sentinel
//
// A Prover needs somewhere, inside the service, that holds the token
// enrolled for a Key.ID and answers from it. PostgreSQL has a table
// (examples/postgres/catalog.Prove computes Respond in SQL). A service
// without such a place has two ways, not equally strong:
//
//   - An identity endpoint (strong; what examples/keys/service does). The
//     service stores the Enrollment a Question carries, once per KeyID and
//     never replaced, and answers every Question itself: Respond over the
//     stored token, the question, its own deployment ID, the salt and the
//     IDs carrying q.Tag, read in the same request. The token crosses the
//     wire once, at enrolment; after that an answer shows the token without
//     revealing it, and the tagged list is covered by the response, so
//     neither a proxy in the path nor a recording of past answers can
//     answer a fresh challenge. The service can keep identities apart from
//     its data: a copy of the data (a backup restored elsewhere) or a reset
//     identity store then has the deployment ID and the resources but no
//     token, and cannot prove the deployment (examples/keys tests it).
//   - A tagged resource of the service's own kind carrying the token
//     (weaker). When the service cannot compute anything, the adapter
//     stores the Enrollment in a resource it can create there (a key, a
//     label, a metadata entry) tagged as the sentinel of the KeyID, and its
//     Prove reads that resource back, with the deployment ID and the IDs
//     carrying q.Tag, and computes Respond itself. The token then crosses
//     the wire on every proof, so the proof is only as strong as the
//     channel and the service's access control: whoever can read that
//     resource or the traffic (no TLS, a proxy terminating it, another
//     user of the service who may read resources) holds the token and can
//     answer for any service. The tagged list is the adapter's reading,
//     not covered by the service's word. And the sentinel is data: a copy
//     of the data carries it and proves the deployment. Use it only over a
//     verified TLS channel, with the sentinel resource readable by the
//     operator's credentials alone, and prefer an identity endpoint
//     wherever the service can offer one.
//
// Either way the deployment ID must be the service's own (an ID of its
// data, read inside the answer), never taken from the sentinel or the
// spec.
//
// # Secrets
//
// A record holds kind, owner UID, namespace/name and the namespace's UID,
// policy, the connection object's name and UID, deployment ID, salt, tag,
// external IDs, two times and the MAC: nothing read from a Secret, not the
// token, not the key.
//
// # Access
//
// Only the operator's ServiceAccount may write the record ConfigMaps and
// read the key Secret: see config/rbac (a Role and RoleBinding in the
// operator's namespace; the user-facing ClusterRole grants nothing there).
package ledger

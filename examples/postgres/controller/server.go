package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/finale-dev/finale/errclass"
	"github.com/finale-dev/finale/examples/postgres/api/v1alpha1"
	"github.com/finale-dev/finale/examples/postgres/catalog"
	"github.com/finale-dev/finale/lifecycle"
)

// Reasons and messages of the Server's conditions (Ready and Synced are
// lifecycle's condition types; the API package names them too).
const (
	ReasonConnected     = "Connected"
	ReasonConnectFailed = "ConnectFailed"
	ReasonSecretMissing = "CredentialSecretMissing"

	MessageConnected     = "connected; deployment identity %s"
	MessageSynced        = "the last reconcile applied the spec"
	MessageSecretMissing = "credential Secret %q does not exist in namespace %s: create it with the keys %q and %q"
)

// Messages of a Server the operator cannot use. They carry the error's
// class, never its text: a Server's status and Events are read by its
// namespace's users, and "connection refused" against "i/o timeout" would
// make the operator a port scanner for them (docs/threat-model.md). A closed port, a
// port speaking another protocol and an address that never answers all
// read as MessageUnreachable. The error itself goes to the operator's log.
const (
	MessageUnreachable   = "the server cannot be reached (Transport error): check host, port and sslMode, and that the operator's network reaches the server; retrying. The cause is in the operator's log"
	MessageAuthFailed    = "the server refused the operator's login (Auth error): check the user name and password in credential Secret %q; retrying. The cause is in the operator's log"
	MessageConnectFailed = "%s error talking to the server; retrying. The cause is in the operator's log"
	// MessageIdentityFailed: the host, the port, the credential Secret
	// and its CA key ("" for the system roots, shown as such).
	MessageIdentityFailed = "the server at %s:%d did not prove its identity (Identity error): its TLS certificate does not verify against %s for that host name, or it offered no TLS although sslMode requires it. " +
		"The login was not attempted, so the user name and password are not the problem. Check the server's certificate and the CA the Server pins, " +
		"and the network path between the operator and the server: a proxy there may be answering in the server's place; retrying. The cause is in the operator's log"
	// Where MessageIdentityFailed says the certificate was checked.
	identityCASecret    = "the CA in credential Secret %q key %q"
	identitySystemRoots = "the operator's system roots"

	ReasonSecretIncomplete  = "CredentialSecretIncomplete"
	MessageSecretIncomplete = "credential Secret %q lacks a non-empty %q or %q key: add them"
	ReasonCAInvalid         = "CACertificateInvalid"
	MessageCAInvalid        = "credential Secret %q holds no PEM certificate under key %q (credentialsSecretRef.caKey): put the CA certificates the server's certificate chains to there"
	// ReasonCAMissing: a Server that must verify the server's certificate
	// (verify-ca, verify-full: the default) has no CA to verify it
	// against. It is not used at all rather than used with a weaker check.
	ReasonCAMissing = "CACertificateMissing"
	// MessageCAMissing: the sslMode, the Secret, the key.
	MessageCAMissing = "sslMode %s verifies the server's certificate, but credential Secret %q has no key %q (credentialsSecretRef.caKey, ca.crt by default): " +
		"put the PEM certificate of the CA that issued the server's certificate there, name the key that holds it in credentialsSecretRef.caKey, " +
		"or set spec.trustSystemRoots for a certificate a public CA issued. The Server is not used until then"
	ReasonSecretUnreadable  = "CredentialSecretUnreadable"
	MessageSecretUnreadable = "the operator cannot read credential Secret %q (%s error); retrying. The cause is in the operator's log"
)

// failure is the Server's condition reason and message for err, of class:
// what the user can fix in the cluster is named, what came from the
// network is its class only.
func failure(err error, class errclass.Class, k Key) (reason, msg string) {
	if errors.Is(err, ErrCredentials) {
		return ReasonSecretIncomplete, fmt.Sprintf(MessageSecretIncomplete, k.Secret, k.UsernameKey, k.PasswordKey)
	}
	if errors.Is(err, ErrCAMissing) {
		return ReasonCAMissing, fmt.Sprintf(MessageCAMissing, k.SSLMode, k.Secret, k.CAKey)
	}
	if errors.Is(err, ErrCA) {
		return ReasonCAInvalid, fmt.Sprintf(MessageCAInvalid, k.Secret, k.CAKey)
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return ReasonSecretUnreadable, fmt.Sprintf(MessageSecretUnreadable, k.Secret, class)
	}
	switch class {
	case errclass.Transport:
		return ReasonConnectFailed, MessageUnreachable
	case errclass.Auth:
		return ReasonConnectFailed, fmt.Sprintf(MessageAuthFailed, k.Secret)
	case errclass.Identity:
		against := identitySystemRoots
		if k.CAKey != "" && (k.SSLMode == v1alpha1.SSLModeVerifyCA || k.SSLMode == v1alpha1.SSLModeVerifyFull) {
			// Only these modes read the CA key (every Key has one by default).
			against = fmt.Sprintf(identityCASecret, k.Secret, k.CAKey)
		}
		return ReasonConnectFailed, fmt.Sprintf(MessageIdentityFailed, k.Host, k.Port, against)
	}
	return ReasonConnectFailed, fmt.Sprintf(MessageConnectFailed, class)
}

// The Server's SweepVerified condition: whether its connection
// authenticates the server, so that the sweeper may delete and remove
// cleanup records through it. Derived from the spec alone (and the admin's
// --sweep-trusted-hosts), so it is there whether or not the server
// answers.
const (
	ConditionSweepVerified = "SweepVerified"
	ReasonAuthenticated    = "ServerAuthenticated"
	ReasonSweepUnverified  = "SweepUnverified"

	// MessageAuthenticated: how the server is authenticated.
	MessageAuthenticated = "%s: the sweeper may confirm deletes through this Server"
	// MessageSweepUnverified: the sslMode.
	MessageSweepUnverified = "sslMode %s does not authenticate the server: a proxy in the path could put a copy of the deployment in its place, " +
		"and the copy would answer every proof as the deployment does. The sweeper therefore deletes nothing and removes no cleanup record through this Server " +
		"(they stay, reported as CleanupRecordUnverified), and deletes of Roles and Databases through it trust the network path. " +
		"Use sslMode verify-full (the default) with the server's CA in the credential Secret under credentialsSecretRef.caKey (ca.crt by default)"
)

// ServerRecheck is how often a connected Server's identity is read again.
const ServerRecheck = 5 * time.Minute

// ServerRetryMax bounds the backoff of a Server that cannot be used (1 s,
// doubling): a Server is the gate every dependent waits on, so a server
// that comes back is noticed within this bound, while one that stays down
// (or refuses the login) costs one attempt per bound, however many
// dependents it has.
const ServerRetryMax = 30 * time.Second

// ServerRateLimiter is the Server controller's default retry spacing.
func ServerRateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, ServerRetryMax)
}

// servers resolves a Server reference to a pool key. r is the manager's
// cache: Servers are read whole, credential Secrets as metadata only (the
// hold's metadata-only watch), so no Secret's data is ever cached; dial
// reads the data live. policy is the admin's allow-list of hosts; trusted
// the hosts and ports the admin vouches are reached over an authenticated
// path (nil: none).
type servers struct {
	r       client.Reader
	policy  *ServerPolicy
	trusted *TrustedEndpoints
}

// Authentication implements lifecycle.Authenticator for both adapters:
// what authenticates the server of a connection made with k, for the
// sweeper.
func (s servers) Authentication(k Key) string { return authentication(k, s.trusted) }

var (
	_ lifecycle.Authenticator[Key] = roleAdapter{}
	_ lifecycle.Authenticator[Key] = databaseAdapter{}
)

// notAllowed is the refusal of a host outside the policy.
type notAllowed struct{ host string }

func (e notAllowed) Error() string { return fmt.Sprintf(MessageServerNotAllowed, e.host) }

func (notAllowed) Unwrap() error { return ErrServerNotAllowed }

// connect returns the connection of the Server ns/name; Parent is nil when
// the Server does not exist.
func (s servers) connect(ctx context.Context, ns, name string) (lifecycle.Connection[Key], error) {
	var srv v1alpha1.Server
	if err := s.r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &srv); err != nil {
		if apierrors.IsNotFound(err) {
			return lifecycle.Connection[Key]{}, nil
		}
		return lifecycle.Connection[Key]{}, fmt.Errorf("get Server %s/%s: %w", ns, name, err)
	}
	key, err := s.key(ctx, &srv)
	return lifecycle.Connection[Key]{Key: key, Parent: &srv}, err
}

// key checks the host against the policy, reads the credential Secret's
// version (never its data) and builds the pool key, with the API defaults
// for fields left empty. Every Key comes from here, so a host the policy
// refuses is never dialled: not by the Server's reconciler, a dependent,
// the hold's access check or the sweeper.
func (s servers) key(ctx context.Context, srv *v1alpha1.Server) (Key, error) {
	ref := srv.Spec.CredentialsSecretRef
	k := Key{
		Namespace: srv.Namespace, Server: srv.Name,
		Host: srv.Spec.Host, Port: srv.Spec.Port, Database: srv.Spec.Database, SSLMode: srv.Spec.SSLMode,
		Secret: ref.Name, UsernameKey: ref.UsernameKey, PasswordKey: ref.PasswordKey, CAKey: ref.CAKey,
	}
	k.Port = orDefault(k.Port, 5432)
	k.Database = orDefault(k.Database, "postgres")
	// The API server fills these defaults in; they are repeated here for
	// a Server read from a store that predates them (or a client that
	// bypasses the CRD's defaulting): the default must be the same either
	// way, and it is the one that authenticates the server.
	k.SSLMode = orDefault(k.SSLMode, v1alpha1.SSLModeVerifyFull)
	k.CAKey = orDefault(k.CAKey, v1alpha1.DefaultCAKey)
	if srv.Spec.TrustSystemRoots {
		k.CAKey = "" // the Key's spelling of the system roots
	}
	k.UsernameKey = orDefault(k.UsernameKey, v1alpha1.DefaultUsernameKey)
	k.PasswordKey = orDefault(k.PasswordKey, v1alpha1.DefaultPasswordKey)
	if !s.policy.Allows(k.Host) {
		return k, &lifecycle.NeedsAction{Reason: ReasonServerNotAllowed, Err: notAllowed{host: k.Host}}
	}
	sec := &metav1.PartialObjectMetadata{}
	sec.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := s.r.Get(ctx, types.NamespacedName{Namespace: srv.Namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return k, &lifecycle.NeedsAction{Reason: ReasonSecretMissing, Err: fmt.Errorf(MessageSecretMissing, ref.Name, srv.Namespace, k.UsernameKey, k.PasswordKey)}
		}
		return k, fmt.Errorf("get credential Secret %s/%s: %w", srv.Namespace, ref.Name, err)
	}
	k.SecretVersion = sec.ResourceVersion
	return k, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// ServerReconciler keeps a Server's status: its deployment identity
// (system_identifier), read through the pool, and its conditions. It owns
// no finalizer: the hold keeps a deleting Server (and its Secret) while
// Roles and Databases still need it.
type ServerReconciler struct {
	c          lifecycle.Client
	servers    servers
	pool       *Pool
	recorder   lifecycle.Recorder
	clock      clock.PassiveClock
	classifier *errclass.Classifier
}

// Reconcile implements reconcile.Reconciler.
func (r *ServerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var srv v1alpha1.Server
	if err := r.c.Get(ctx, req.NamespacedName, &srv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !srv.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	base := srv.DeepCopy()
	key, err := r.servers.key(ctx, &srv)
	identity := ""
	if err == nil {
		err = r.pool.Do(ctx, key, func(ctx context.Context, c *Conn) error {
			if err := c.Ping(ctx); err != nil {
				return err
			}
			var err error
			identity, err = catalog.Identity(ctx, c)
			return err
		})
	}
	var na *lifecycle.NeedsAction
	var events []metav1.Condition
	set := func(typ string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		c := metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: srv.Generation, LastTransitionTime: metav1.NewTime(r.clock.Now())}
		if old := meta.FindStatusCondition(srv.Status.Conditions, typ); old == nil || old.Status != st || old.Reason != reason {
			events = append(events, c)
		}
		meta.SetStatusCondition(&srv.Status.Conditions, c)
	}
	if how := r.servers.Authentication(key); how != "" {
		set(ConditionSweepVerified, true, ReasonAuthenticated, fmt.Sprintf(MessageAuthenticated, how))
	} else {
		set(ConditionSweepVerified, false, ReasonSweepUnverified, fmt.Sprintf(MessageSweepUnverified, key.SSLMode))
	}
	res := reconcile.Result{RequeueAfter: ServerRecheck}
	var failed error // returned after the status write, for the workqueue's backoff
	switch {
	case errors.As(err, &na):
		set(v1alpha1.ConditionSynced, false, na.Reason, na.Error())
		set(v1alpha1.ConditionReady, false, na.Reason, na.Error())
		res.RequeueAfter = lifecycle.DefaultRetryInterval
	case err != nil:
		class := r.classifier.Classify(ctx, err)
		log.FromContext(ctx).Info("cannot use the Server", "class", class, "error", err.Error())
		reason, msg := failure(err, class, key)
		set(v1alpha1.ConditionSynced, false, reason, msg)
		set(v1alpha1.ConditionReady, false, reason, msg)
		failed = fmt.Errorf("server %s: %s: %w", req.NamespacedName, class, err)
	default:
		srv.Status.Identity = identity
		set(v1alpha1.ConditionSynced, true, lifecycle.ReasonReconcileSuccess, MessageSynced)
		set(v1alpha1.ConditionReady, true, ReasonConnected, fmt.Sprintf(MessageConnected, identity))
	}
	srv.Status.ObservedGeneration = srv.Generation
	if !equalStatus(base, &srv) {
		if err := r.c.Status().Patch(ctx, &srv, client.MergeFrom(base)); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		// One Event per reason and type: the events API folds Events that
		// differ only in their note into one series, keeping whichever
		// note came first, so two conditions changing to the same reason
		// would leave a note that depends on timing.
		// The events API requires an action; a Server's Events all come
		// from its reconcile.
		const action = "Reconcile"
		emitted := map[string]bool{}
		for _, c := range events {
			typ := corev1.EventTypeNormal
			if c.Status != metav1.ConditionTrue {
				typ = corev1.EventTypeWarning
			}
			if emitted[typ+c.Reason] {
				continue
			}
			emitted[typ+c.Reason] = true
			r.recorder.Eventf(&srv, nil, typ, c.Reason, action, "%s=%s: %s", c.Type, c.Status, c.Message)
		}
	}
	if failed != nil {
		return reconcile.Result{}, failed
	}
	return res, nil
}

func equalStatus(a, b *v1alpha1.Server) bool {
	if a.Status.Identity != b.Status.Identity || a.Status.ObservedGeneration != b.Status.ObservedGeneration || len(a.Status.Conditions) != len(b.Status.Conditions) {
		return false
	}
	for i := range a.Status.Conditions {
		x, y := a.Status.Conditions[i], b.Status.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

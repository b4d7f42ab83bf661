package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/finale-dev/finale/examples/temporal/api/v1alpha1"
)

const (
	// Finalizer keeps a WorkerDeployment until its server-side deployment
	// is cleaned up.
	Finalizer = "temporal.finale.dev/brownfield-cleanup"
	// RequeueAfter is how soon a WorkerDeployment is looked at again: after
	// a failed cleanup, and after a successful reconcile.
	RequeueAfter = 10 * time.Second
)

// Reasons of the Ready condition.
const (
	ReasonAvailable            = "Available"
	ReasonConnectionNotFound   = "ConnectionNotFound"
	ReasonClientCreationFailed = "TemporalClientCreationFailed"
	ReasonStateFetchFailed     = "TemporalStateFetchFailed"
	ReasonDeploymentFailed     = "DeploymentFailed"
)

// readyMessages say what each reason means; the error itself is logged.
var readyMessages = map[string]string{
	ReasonAvailable:            "the server-side worker deployment exists and is managed by this controller",
	ReasonConnectionNotFound:   "the Connection named by connectionRef could not be read",
	ReasonClientCreationFailed: "no Temporal client could be made for the Connection",
	ReasonStateFetchFailed:     "the server-side worker deployment could not be described",
	ReasonDeploymentFailed:     "the server-side worker deployment could not be created or claimed",
}

// WorkerDeploymentReconciler creates each WorkerDeployment's server-side
// deployment and, when the object is deleted, cleans it up.
type WorkerDeploymentReconciler struct {
	client.Client
	TemporalClientPool *ClientPool
	// Identity is the SDK clients' identity and the deployments' manager.
	Identity string
}

// New returns the reconciler of mgr's WorkerDeployments, its clients
// calling as identity.
func New(mgr ctrl.Manager, identity string) (*WorkerDeploymentReconciler, error) {
	return &WorkerDeploymentReconciler{
		Client:             mgr.GetClient(),
		TemporalClientPool: NewClientPool(&dialer{secrets: mgr.GetAPIReader(), identity: identity}),
		Identity:           identity,
	}, nil
}

// SetupWithManager registers the reconciler with mgr.
func (r *WorkerDeploymentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.WorkerDeployment{}).Complete(r)
}

// Reconcile cleans up a deleted WorkerDeployment's deployment, or makes a
// live one's exist.
func (r *WorkerDeploymentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	l := log.FromContext(ctx)
	var wd v1alpha1.WorkerDeployment
	if err := r.Get(ctx, req.NamespacedName, &wd); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	if !wd.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(&wd, Finalizer) {
			return ctrl.Result{}, nil
		}
		if err := r.handleDeletion(ctx, l, &wd); err != nil {
			l.Error(err, "failed to clean up the server-side deployment, will retry")
			return ctrl.Result{RequeueAfter: RequeueAfter}, nil
		}
		patch := client.MergeFrom(wd.DeepCopy())
		controllerutil.RemoveFinalizer(&wd, Finalizer)
		return ctrl.Result{}, r.Patch(ctx, &wd, patch)
	}

	if !controllerutil.ContainsFinalizer(&wd, Finalizer) {
		patch := client.MergeFrom(wd.DeepCopy())
		controllerutil.AddFinalizer(&wd, Finalizer)
		if err := r.Patch(ctx, &wd, patch); err != nil {
			return ctrl.Result{}, err
		}
	}

	conn, err := r.getConnection(ctx, &wd)
	if err != nil {
		r.setNotReady(ctx, &wd, ReasonConnectionNotFound)
		return ctrl.Result{}, err
	}
	key := clientPoolKey(conn, &wd)
	temporalClient, ok := r.TemporalClientPool.GetSDKClient(key)
	if !ok {
		c, err := r.TemporalClientPool.DialAndUpsertClient(ctx, key)
		if err != nil {
			r.setNotReady(ctx, &wd, ReasonClientCreationFailed)
			return ctrl.Result{}, err
		}
		temporalClient = c
	}

	state, err := getDeploymentState(ctx, temporalClient, wd.Spec.DeploymentName)
	if err != nil {
		if isAccessDeniedErr(err) {
			r.TemporalClientPool.EvictClient(key)
		}
		r.setNotReady(ctx, &wd, ReasonStateFetchFailed)
		return ctrl.Result{}, err
	}
	if err := ensureDeployment(ctx, temporalClient, &wd, state, r.Identity); err != nil {
		if isAccessDeniedErr(err) {
			r.TemporalClientPool.EvictClient(key)
		}
		r.setNotReady(ctx, &wd, ReasonDeploymentFailed)
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: RequeueAfter}, r.setReady(ctx, &wd, metav1.ConditionTrue, ReasonAvailable)
}

// handleDeletion cleans up the server-side deployment of a deleted
// WorkerDeployment with its Connection's client.
func (r *WorkerDeploymentReconciler) handleDeletion(ctx context.Context, l logr.Logger, wd *v1alpha1.WorkerDeployment) error {
	conn, err := r.getConnection(ctx, wd)
	if err != nil {
		return err
	}
	key := clientPoolKey(conn, wd)
	temporalClient, ok := r.TemporalClientPool.GetSDKClient(key)
	if !ok {
		c, err := r.TemporalClientPool.DialAndUpsertClient(ctx, key)
		if err != nil {
			return fmt.Errorf("create Temporal client: %w", err)
		}
		temporalClient = c
	}
	return cleanupDeployment(ctx, l, temporalClient, wd.Spec.DeploymentName, r.Identity)
}

func (r *WorkerDeploymentReconciler) getConnection(ctx context.Context, wd *v1alpha1.WorkerDeployment) (*v1alpha1.Connection, error) {
	var conn v1alpha1.Connection
	name := types.NamespacedName{Namespace: wd.Namespace, Name: wd.Spec.ConnectionRef.Name}
	if err := r.Get(ctx, name, &conn); err != nil {
		return nil, fmt.Errorf("get Connection %s: %w", name, err)
	}
	return &conn, nil
}

func clientPoolKey(conn *v1alpha1.Connection, wd *v1alpha1.WorkerDeployment) ClientPoolKey {
	key := ClientPoolKey{
		HostPort: conn.Spec.HostPort, TemporalNamespace: wd.Spec.TemporalNamespace,
		SecretNamespace: wd.Namespace, SecretName: conn.Spec.APIKeySecretRef.Name, SecretKey: conn.Spec.APIKeySecretRef.Key,
		Plaintext: conn.Spec.Plaintext,
	}
	if key.SecretKey == "" {
		key.SecretKey = v1alpha1.DefaultAPIKeySecretKey
	}
	return key
}

// setNotReady records why the reconcile failed; the reconcile's own error
// is what is retried, so a failed status write is only logged.
func (r *WorkerDeploymentReconciler) setNotReady(ctx context.Context, wd *v1alpha1.WorkerDeployment, reason string) {
	if err := r.setReady(ctx, wd, metav1.ConditionFalse, reason); err != nil {
		log.FromContext(ctx).Error(err, "failed to write the Ready condition", "reason", reason)
	}
}

func (r *WorkerDeploymentReconciler) setReady(ctx context.Context, wd *v1alpha1.WorkerDeployment, status metav1.ConditionStatus, reason string) error {
	meta.SetStatusCondition(&wd.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: status, Reason: reason, Message: readyMessages[reason], ObservedGeneration: wd.Generation,
	})
	wd.Status.ObservedGeneration = wd.Generation
	return r.Status().Update(ctx, wd)
}

// isAccessDeniedErr is when a client is dropped: its credentials were
// refused.
func isAccessDeniedErr(err error) bool {
	var denied *serviceerror.PermissionDenied
	return errors.As(err, &denied) || grpcstatus.Code(err) == codes.Unauthenticated
}

package controller

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/examples/temporal/api/v1alpha1"
	"github.com/finale-dev/finale/ledger"
	"github.com/finale-dev/finale/lifecycle"
)

// Condition reasons of this operator (lifecycle's own are in lifecycle).
const (
	ReasonAPIKeyMissing       = "APIKeySecretMissing"
	ReasonDeploymentUnclaimed = "DeploymentUnclaimed"
	ReasonDeploymentForeign   = "DeploymentManagedElsewhere"
)

// Errors that need the user; their text is constant, so conditions built
// from them carry no SDK or API error text.
var (
	ErrAPIKeyMissing       = errors.New("the API-key Secret named by the Connection does not exist or lacks its key")
	ErrDeploymentUnclaimed = errors.New("a worker deployment of this name exists on the server without a manager identity")
	ErrDeploymentForeign   = errors.New("the worker deployment of this name is managed by another identity")
)

// ErrNoProof is Prove's answer: see the package documentation.
var ErrNoProof = errors.New("temporal example: no deployment proof; this operator runs without cleanup records (lifecycle.SkipLedger)")

type wd = v1alpha1.WorkerDeployment

// adapter is the lifecycle.Adapter of WorkerDeployments.
type adapter struct {
	// r reads Connections and Secrets; live (the manager's API reader),
	// so that a Secret created a moment ago is seen.
	r client.Reader
}

// Connect reads the Connection and checks that the API key's Secret is
// there, before any client is dialled.
func (a adapter) Connect(ctx context.Context, obj *wd) (lifecycle.Connection[Key], error) {
	var conn v1alpha1.Connection
	name := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Spec.ConnectionRef.Name}
	if err := a.r.Get(ctx, name, &conn); err != nil {
		if apierrors.IsNotFound(err) {
			return lifecycle.Connection[Key]{}, nil
		}
		return lifecycle.Connection[Key]{}, fmt.Errorf("read Connection %s: %w", name, err)
	}
	key := Key{
		HostPort: conn.Spec.HostPort, TemporalNamespace: obj.Spec.TemporalNamespace,
		Namespace: obj.Namespace, Secret: conn.Spec.APIKeySecretRef.Name, SecretKey: conn.Spec.APIKeySecretRef.Key,
		Plaintext: conn.Spec.Plaintext,
	}
	if key.SecretKey == "" {
		key.SecretKey = v1alpha1.DefaultAPIKeySecretKey
	}
	out := lifecycle.Connection[Key]{Key: key, Parent: &conn}
	if _, err := readAPIKey(ctx, a.r, key); err != nil {
		if !apierrors.IsNotFound(err) && !errors.Is(err, errKeyAbsent) {
			return out, err // the read failed for another reason: retried
		}
		return out, &lifecycle.NeedsAction{
			Reason: ReasonAPIKeyMissing,
			Action: fmt.Sprintf("create Secret %s/%s with the Temporal API key under key %q; no client is dialled until it exists", key.Namespace, key.Secret, key.SecretKey),
			Err:    ErrAPIKeyMissing,
		}
	}
	return out, nil
}

// Prove is never called: the operator runs without cleanup records.
func (adapter) Prove(context.Context, sdkclient.Client, ledger.Question) (ledger.Answer, error) {
	return ledger.Answer{}, ErrNoProof
}

// Observe describes the deployment: this object's when its manager
// identity is the tag. For a deleting object, a deployment that is not
// its own is simply none of its business (the cleanup finds nothing to
// delete); for a live one it is refused, never adopted.
func (adapter) Observe(ctx context.Context, c sdkclient.Client, obj *wd, tag string) (lifecycle.Observation, error) {
	resp, err := c.WorkerDeploymentClient().GetHandle(obj.Spec.DeploymentName).Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
	if err != nil {
		if isNotFound(err) {
			return lifecycle.Observation{}, nil
		}
		return lifecycle.Observation{}, fmt.Errorf("describe worker deployment %q: %w", obj.Spec.DeploymentName, err)
	}
	mine := lifecycle.Observation{IDs: []string{resp.Info.Name}, UpToDate: true}
	own := ownershipOf(resp.Info, tag)
	switch {
	case own == ours:
		return mine, nil
	case !obj.DeletionTimestamp.IsZero():
		if own == claimLost {
			return mine, nil
		}
		return lifecycle.Observation{}, nil
	case own == claimLost:
		// Create finishes the claim: its request ID is this object's UID,
		// so the server answers the create again instead of refusing it.
		return lifecycle.Observation{}, nil
	case resp.Info.ManagerIdentity == "":
		return lifecycle.Observation{}, &lifecycle.NeedsAction{
			Reason: ReasonDeploymentUnclaimed,
			Action: fmt.Sprintf("if it is this object's, set its manager identity to %s (it is then adopted); otherwise choose another deploymentName", tag),
			Err:    ErrDeploymentUnclaimed,
		}
	default:
		return lifecycle.Observation{}, &lifecycle.NeedsAction{
			Reason: ReasonDeploymentForeign,
			Action: "choose another deploymentName; this operator never changes or deletes a deployment it does not manage",
			Err:    ErrDeploymentForeign,
		}
	}
}

// ownership is whose a described deployment is.
type ownership int

const (
	// foreign: managed by another identity, or by none and last changed
	// by someone else.
	foreign ownership = iota
	// ours: its manager identity is the tag.
	ours
	// claimLost: no manager, and the tag was the last to change it: this
	// object's create, whose claim did not land.
	claimLost
)

func ownershipOf(info sdkclient.WorkerDeploymentInfo, tag string) ownership {
	switch {
	case info.ManagerIdentity == tag:
		return ours
	case info.ManagerIdentity == "" && info.LastModifierIdentity == tag:
		return claimLost
	default:
		return foreign
	}
}

// Create creates the deployment and claims it with the tag in one
// conflict-token chain: the claim applies only to the deployment this
// request created. The request ID is the object's UID, so a create whose
// answer was lost is answered again, not refused.
func (adapter) Create(ctx context.Context, c sdkclient.Client, obj *wd, tag string) (string, error) {
	name := obj.Spec.DeploymentName
	resp, err := c.WorkflowService().CreateWorkerDeployment(ctx, &workflowservice.CreateWorkerDeploymentRequest{
		Namespace: obj.Spec.TemporalNamespace, DeploymentName: name, Identity: tag, RequestId: string(obj.UID),
	})
	if err != nil {
		return "", fmt.Errorf("create worker deployment %q: %w", name, err)
	}
	_, err = c.WorkerDeploymentClient().GetHandle(name).SetManagerIdentity(ctx, sdkclient.WorkerDeploymentSetManagerIdentityOptions{
		ManagerIdentity: tag, Identity: tag, ConflictToken: resp.GetConflictToken(),
	})
	if err != nil {
		return "", fmt.Errorf("claim worker deployment %q: %w", name, err)
	}
	return name, nil
}

// Update has nothing to do: the spec's fields are all immutable.
func (adapter) Update(context.Context, sdkclient.Client, *wd, string, string) error { return nil }

// Delete cleans the server-side deployment up as temporal-worker-controller
// does: describe it, take routing off its versions, delete every version,
// then the deployment. NotFound at any step is success for that step, and
// so is a deployment that is not the tag's (lifecycle's contract: nothing
// carrying the tag is left). Every call carries the tag as its identity,
// so the server refuses it if another identity took the deployment over
// in between.
func (adapter) Delete(ctx context.Context, c sdkclient.Client, id, tag string) error {
	h := c.WorkerDeploymentClient().GetHandle(id)
	resp, err := h.Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("describe worker deployment %q: %w", id, err)
	}
	if ownershipOf(resp.Info, tag) == foreign {
		return nil // nothing of this tag's: never touch another manager's deployment
	}
	token := resp.ConflictToken
	rc := resp.Info.RoutingConfig
	// Ramping first, then current: never a moment in which traffic is
	// split between unversioned workers and a ramping version.
	if rc.RampingVersion != nil {
		r, err := h.SetRampingVersion(ctx, sdkclient.WorkerDeploymentSetRampingVersionOptions{ConflictToken: token, Identity: tag})
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("clear the ramping version of %q: %w", id, err)
		}
		token = r.ConflictToken
	}
	if rc.CurrentVersion != nil {
		_, err := h.SetCurrentVersion(ctx, sdkclient.WorkerDeploymentSetCurrentVersionOptions{ConflictToken: token, Identity: tag, IgnoreMissingTaskQueues: true})
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("route %q to unversioned workers: %w", id, err)
		}
	}
	for _, v := range resp.Info.VersionSummaries {
		_, err := h.DeleteVersion(ctx, sdkclient.WorkerDeploymentDeleteVersionOptions{BuildID: v.Version.BuildID, SkipDrainage: true, Identity: tag})
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("delete version %s of %q: %w", v.Version.BuildID, id, err)
		}
	}
	_, err = c.WorkerDeploymentClient().Delete(ctx, sdkclient.WorkerDeploymentDeleteOptions{Name: id, Identity: tag})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete worker deployment %q: %w", id, err)
	}
	return nil
}

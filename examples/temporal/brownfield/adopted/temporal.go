package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/finale-dev/finale/examples/temporal/api/v1alpha1"
)

// errManagedElsewhere: the deployment of this name has another manager.
var errManagedElsewhere = errors.New("the worker deployment is managed by another identity")

// deploymentState is what the server says about a worker deployment.
type deploymentState struct {
	exists        bool
	manager       string
	conflictToken []byte
}

// getDeploymentState describes the deployment; a missing one is a state,
// not an error.
func getDeploymentState(ctx context.Context, c sdkclient.Client, name string) (deploymentState, error) {
	resp, err := c.WorkerDeploymentClient().GetHandle(name).Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
	if isNotFound(err) {
		return deploymentState{}, nil
	}
	if err != nil {
		return deploymentState{}, fmt.Errorf("describe worker deployment %q: %w", name, err)
	}
	return deploymentState{exists: true, manager: resp.Info.ManagerIdentity, conflictToken: resp.ConflictToken}, nil
}

// ensureDeployment makes the deployment exist with identity as its
// manager: it creates a missing one (idempotently, by the object's UID)
// and claims one that has no manager (workers that poll first create it).
// One that another identity manages is refused.
func ensureDeployment(ctx context.Context, c sdkclient.Client, wd *v1alpha1.WorkerDeployment, state deploymentState, identity string) error {
	name := wd.Spec.DeploymentName
	switch {
	case state.exists && state.manager == identity:
		return nil
	case state.exists && state.manager != "":
		return fmt.Errorf("%q: %w (%s)", name, errManagedElsewhere, state.manager)
	case !state.exists:
		resp, err := c.WorkflowService().CreateWorkerDeployment(ctx, &workflowservice.CreateWorkerDeploymentRequest{
			Namespace: wd.Spec.TemporalNamespace, DeploymentName: name, Identity: identity, RequestId: string(wd.UID),
		})
		if err != nil {
			return fmt.Errorf("create worker deployment %q: %w", name, err)
		}
		state.conflictToken = resp.GetConflictToken()
	}
	_, err := c.WorkerDeploymentClient().GetHandle(name).SetManagerIdentity(ctx, sdkclient.WorkerDeploymentSetManagerIdentityOptions{
		ManagerIdentity: identity, Identity: identity, ConflictToken: state.conflictToken,
	})
	if err != nil {
		return fmt.Errorf("claim worker deployment %q: %w", name, err)
	}
	return nil
}

// cleanupDeployment removes the deployment from the server: routing off
// its versions, the versions, then the deployment. A deployment that is
// gone, or that another identity manages, needs nothing.
func cleanupDeployment(ctx context.Context, l logr.Logger, c sdkclient.Client, name, identity string) error {
	h := c.WorkerDeploymentClient().GetHandle(name)
	resp, err := h.Describe(ctx, sdkclient.WorkerDeploymentDescribeOptions{})
	if isNotFound(err) {
		l.Info("worker deployment not found on the server, nothing to clean up", "deployment", name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("describe worker deployment %q: %w", name, err)
	}
	if m := resp.Info.ManagerIdentity; m != "" && m != identity {
		l.Info("worker deployment managed by another identity, left alone", "deployment", name, "manager", m)
		return nil
	}
	if err := unroute(ctx, h, resp, identity); err != nil {
		return err
	}
	if err := deleteVersions(ctx, h, resp.Info.VersionSummaries, identity); err != nil {
		return err
	}
	_, err = c.WorkerDeploymentClient().Delete(ctx, sdkclient.WorkerDeploymentDeleteOptions{Name: name, Identity: identity})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete worker deployment %q: %w", name, err)
	}
	return nil
}

// unroute sends new tasks to unversioned workers: the ramping version is
// cleared before the current one, so that traffic is never split between
// unversioned workers and a ramping version.
func unroute(ctx context.Context, h sdkclient.WorkerDeploymentHandle, resp sdkclient.WorkerDeploymentDescribeResponse, identity string) error {
	token, rc := resp.ConflictToken, resp.Info.RoutingConfig
	if rc.RampingVersion != nil {
		r, err := h.SetRampingVersion(ctx, sdkclient.WorkerDeploymentSetRampingVersionOptions{ConflictToken: token, Identity: identity})
		if err != nil {
			return fmt.Errorf("clear the ramping version: %w", err)
		}
		token = r.ConflictToken
	}
	if rc.CurrentVersion != nil {
		_, err := h.SetCurrentVersion(ctx, sdkclient.WorkerDeploymentSetCurrentVersionOptions{ConflictToken: token, Identity: identity, IgnoreMissingTaskQueues: true})
		if err != nil {
			return fmt.Errorf("route to unversioned workers: %w", err)
		}
	}
	return nil
}

// deleteVersions deletes every version without waiting for it to drain:
// the deployment is going away.
func deleteVersions(ctx context.Context, h sdkclient.WorkerDeploymentHandle, versions []sdkclient.WorkerDeploymentVersionSummary, identity string) error {
	for _, v := range versions {
		_, err := h.DeleteVersion(ctx, sdkclient.WorkerDeploymentDeleteVersionOptions{BuildID: v.Version.BuildID, SkipDrainage: true, Identity: identity})
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("delete version %s: %w", v.Version.BuildID, err)
		}
	}
	return nil
}

// isNotFound reports the server's NotFound answer.
func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

package webhook

import (
	"context"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// SyncService starts syncs and reports their progress for deputy's API. File
// mode runs them in this process (*syncer.Operations); cluster mode records
// the request on the Application (its operation field) for the leader to run
// and reports from the Application's status.
type SyncService interface {
	// Start requests a sync of app (governed by project) and returns the
	// operation's state as of the request.
	//
	// Errors: syncer.ErrOperationInProgress while an operation of the
	// Application is pending or runs (409), syncer.ErrShuttingDown (503),
	// others (500).
	Start(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, op v1alpha1.SyncOperation, initiatedBy v1alpha1.InitiatedBy) (*v1alpha1.OperationState, error)
	// ApplicationStatus is the Application's status as deputy knows it.
	ApplicationStatus(namespace, name string) v1alpha1.ApplicationStatus
	// Watch streams the current operation's progress until it ends, then
	// closes the channel (see syncer.Operations.Watch).
	Watch(ctx context.Context, namespace, name string) <-chan syncer.Event
}

var _ SyncService = (*syncer.Operations)(nil)

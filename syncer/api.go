package syncer

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
)

// FieldManager is the server-side apply field manager of every write.
const FieldManager = "deputy"

// TrackingAnnotation marks the objects an Application manages; its value is
// "<application namespace>/<application name>". Prune deletes only objects
// carrying it with this Application's value.
const TrackingAnnotation = "deputy.dev/tracking-id"

// ControllerIdentity is the OperationState.Identity of a sync that ran
// without impersonation because no destinationServiceAccounts entry matched
// and impersonation is not enforced.
const ControllerIdentity = "controller identity: impersonation not enforced"

// ControllerIdentityImpersonationDisabled is the OperationState.Identity of
// a sync that ran without impersonation because sync.impersonation.enabled
// is false.
const ControllerIdentityImpersonationDisabled = "controller identity: impersonation disabled"

// Request is one operation to run.
type Request struct {
	// Application is the Application to sync (a copy the engine may read).
	Application *v1alpha1.Application
	// Project is its AppProject (deputy.dev, same namespace).
	Project *v1alpha1.AppProject
	// Sync parameterises the operation (revision, prune, dryRun).
	Sync v1alpha1.SyncOperation
	// InitiatedBy says who asked.
	InitiatedBy v1alpha1.InitiatedBy
	// Previous is the final state of this operation's previous attempt
	// when this run is a retry (spec.syncPolicy.retry), nil otherwise. Its
	// hooks that succeeded are not run again when this run renders the same
	// revisions (their results are carried over); hooks that failed or did
	// not finish run again.
	Previous *v1alpha1.OperationState
}

// Progress receives each resource's result as soon as it is known, and the
// operation's state when its phase changes. Implementations must not block.
type Progress func(state *v1alpha1.OperationState, resource *v1alpha1.ResourceResult)

// Runner runs one operation to completion and returns its final state
// (phase Succeeded, Failed or Error; never Running). It never panics and
// never returns nil. The Engine implements it.
type Runner interface {
	Run(ctx context.Context, req Request, progress Progress) *v1alpha1.OperationState
}

// RunnerFunc adapts a function to a Runner.
type RunnerFunc func(ctx context.Context, req Request, progress Progress) *v1alpha1.OperationState

// Run implements Runner.
func (f RunnerFunc) Run(ctx context.Context, req Request, progress Progress) *v1alpha1.OperationState {
	return f(ctx, req, progress)
}

// RevisionResolver resolves an Application's targetRevisions to commit
// SHAs, one per source (spec.sources in order, or spec.source alone), after
// checking every source against project as a sync does: a repository the
// project does not permit is never fetched (the Engine implements it:
// Engine.ResolveRevisions). The Application controller (package apps)
// compares them with status.sync.revisions (or revision) to decide whether
// Git moved.
type RevisionResolver interface {
	ResolveRevisions(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject) ([]string, error)
}

// DiffRequest is one diff to compute (Engine.Diff).
type DiffRequest struct {
	// Application and Project as in Request.
	Application *v1alpha1.Application
	Project     *v1alpha1.AppProject
	// Sync selects the revisions to render (Revision, Revisions) as a
	// sync's operation does; its other fields are ignored.
	Sync v1alpha1.SyncOperation
	// Objects, when non-nil, are diffed instead of the render (deputy diff
	// --local): everything else is the same; the answer has no revisions.
	Objects []*unstructured.Unstructured
}

// Differ computes what a sync would change (the Engine implements it:
// Engine.Diff). Errors are the operation's: the Application or its project
// is unusable, the source does not render, the ServiceAccount cannot be
// derived or the destination cannot be reached; each message names the
// field or permission to fix.
type Differ interface {
	Diff(ctx context.Context, req DiffRequest) (*v1alpha1.ApplicationDiff, error)
}

// Comparison is the live state of an Application compared with what its
// source renders (Engine.Compare): status.sync and status.resources of
// drift detection.
type Comparison struct {
	// Status is v1alpha1.SyncStatusCodeSynced or
	// v1alpha1.SyncStatusCodeOutOfSync.
	Status string
	// Revisions are the commits compared with, one per source.
	Revisions []string
	// Resources are the rendered objects (hooks excluded) and the tracked
	// objects no longer rendered (RequiresPruning), each Synced or
	// OutOfSync with a Message saying why.
	Resources []v1alpha1.ResourceStatus
}

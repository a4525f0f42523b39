package apps

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"deputy.dev/deputy/apps/gitpush"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// ApplicationsResource is the resource of deputy.dev Applications.
var ApplicationsResource = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: "applications"}

// ErrOperationInProgress is returned by Start and Trigger while an operation
// of the same Application is pending or runs (Argo CD's message; deputy's
// API answers 409, the Git push webhook reports the Application as already
// in progress).
var ErrOperationInProgress = errors.New("another operation is already in progress")

// ErrShuttingDown is returned by Start and Trigger once deputy stops taking
// operations (file mode: after Shutdown began; deputy's API answers 503).
var ErrShuttingDown = errors.New("deputy is shutting down: no new operations are started")

// Applications is deputy's Applications in one run mode, behind one contract
// for deputy's API and the Git push webhook. File mode (NewFile) reads
// Applications and AppProjects from the policy snapshot and runs operations
// in this process; cluster mode (NewController) reads them from the cluster
// through informers, records a requested operation on the Application (its
// operation field, as Argo CD does) and the replica holding the Lease runs
// it. Implementations are safe for concurrent use.
type Applications interface {
	// Application returns the Application namespace/name (a copy), nil
	// when there is none.
	//
	// Errors: policy.ErrNotLoaded while nothing has been loaded yet.
	Application(namespace, name string) (*v1alpha1.Application, error)
	// AppProject returns the deputy.dev AppProject that governs app (a
	// copy; policy.ResolveAppProject over the project namespaces).
	//
	// Errors: one matching policy.ErrProjectNotUsable when app may use no
	// project (none of that name where projects live, or the project does
	// not admit app's namespace), naming the fix; policy.ErrNotLoaded while
	// nothing has been loaded yet.
	AppProject(app *v1alpha1.Application) (*v1alpha1.AppProject, error)
	// Start requests a sync of app (governed by project, as AppProject
	// returned it) and returns the operation's state as of the request:
	// Running. File mode runs it at once; cluster mode records it on the
	// Application and the leader looks the project up again when it runs
	// it. A failed attempt is retried as spec.syncPolicy.retry says (see
	// retry.go); the operation is in progress until it ends.
	//
	// Errors: ErrOperationInProgress while an operation of the Application
	// is pending or runs (409; in cluster mode also while a failed attempt
	// waits for its retry, which removing the operation field cancels; file
	// mode replaces such an operation), ErrInvalidSync (422: invalid
	// spec.syncPolicy.retry or healthTimeout, or operation healthTimeout),
	// ErrShuttingDown (503), the API's NotFound or Conflict (cluster mode),
	// others (500).
	Start(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, op v1alpha1.SyncOperation, initiatedBy v1alpha1.InitiatedBy) (*v1alpha1.OperationState, error)
	// Diff computes what a sync of app (governed by project, as AppProject
	// returned it) with op's revisions (Revision or Revisions; op's other
	// fields are ignored) would change: the syncer.Differ renders the
	// target and dry-runs every object on the destination as the derived
	// ServiceAccount. It runs in the calling goroutine, not in the
	// operations queue, on any replica (it writes nothing); at most
	// sync.parallelism diffs run at once per process.
	//
	// Errors: ErrDiffUnavailable (no sync engine: 503), ErrTooManyDiffs
	// (the bound is reached: 429), ErrInvalidSync (op is invalid: 422),
	// ctx's error, and the Differ's (see syncer.Differ). objects, when
	// non-nil, are diffed instead of the render (syncer.DiffRequest.Objects).
	Diff(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, op v1alpha1.SyncOperation, objects []*unstructured.Unstructured) (*v1alpha1.ApplicationDiff, error)
	// ApplicationStatus is the Application's status as deputy knows it:
	// the latest operation's state, the sync status it implies
	// (v1alpha1.SyncStatusAfter; Unknown when nothing tells it), and
	// status.health and status.resources as the last attempt that applied
	// something left them (absent before one did; see recordOutcome).
	ApplicationStatus(namespace, name string) v1alpha1.ApplicationStatus
	// Watch streams the progress of the Application's current operation
	// until it ends (first what is known, then every event, the final state
	// last; a failed attempt waiting for its retry is a Running state with
	// nextRetryAt, not the end: the retry's events follow), then closes
	// the channel; without a current operation it sends
	// the latest state, if any, and closes. Cancelling ctx closes it too.
	Watch(ctx context.Context, namespace, name string) <-chan v1alpha1.OperationEvent
	// PushTargets: every Application, and the automated sync a Git push
	// triggers (SyncPush).
	PushTargets
}

// PushTargets are what a Git push acts on (SyncPush).
type PushTargets interface {
	// List returns every Application deputy knows (shared: read them, do
	// not modify them).
	//
	// Errors: policy.ErrNotLoaded while nothing has been loaded yet.
	List() ([]*v1alpha1.Application, error)
	// Trigger requests an automated sync of app because of push, if app is
	// automated (spec.syncPolicy.automated, with its prune setting); it does
	// nothing for another. The sync is initiated by push.Initiator(),
	// automated. ctx is not cancelled when the sender disconnects.
	//
	// Errors: as Start's; ErrOperationInProgress is not a failure (the
	// pending operation syncs the pushed revision too).
	Trigger(ctx context.Context, app *v1alpha1.Application, push gitpush.Push) error
}

// ProjectResolver returns the deputy.dev AppProject an Application uses: a
// copy, an error matching policy.ErrProjectNotUsable when it may use none
// (see Applications.AppProject), or policy.ErrNotLoaded while the AppProjects
// have not been read yet.
type ProjectResolver func(app *v1alpha1.Application) (*v1alpha1.AppProject, error)

// snapshotProjects resolves AppProjects in file mode: in the current policy
// snapshot, in projectNamespaces (sync.projectNamespaces).
func snapshotProjects(current func() *policy.Snapshot, projectNamespaces []string) ProjectResolver {
	return func(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
		snap := current()
		if snap == nil {
			return nil, policy.ErrNotLoaded
		}
		return resolveProject(app, projectNamespaces, snap.DeputyAppProject)
	}
}

// ClusterProjects resolves AppProjects in cluster mode: in the cluster state
// (the AppProjects the impersonation gate reads), in projectNamespaces. It
// answers policy.ErrNotLoaded until the cluster has been listed.
func ClusterProjects(state func() *policy.ClusterState, projectNamespaces []string) ProjectResolver {
	return func(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
		st := state()
		if st == nil || !st.Synced {
			return nil, policy.ErrNotLoaded
		}
		return resolveProject(app, projectNamespaces, st.DeputyAppProject)
	}
}

// resolveProject is the one rule of both modes: policy.ResolveAppProject over
// projectNamespaces in lookup, a copy of what it finds.
func resolveProject(app *v1alpha1.Application, projectNamespaces []string, lookup func(namespace, name string) *v1alpha1.AppProject) (*v1alpha1.AppProject, error) {
	p, err := policy.ResolveAppProject(app, projectNamespaces, lookup)
	if err != nil {
		return nil, err
	}
	return p.DeepCopy(), nil
}

// automated is app's automated sync policy, nil when app is synced only on
// request: the one "is it automated" rule of the controller, the file mode
// and the Git push.
func automated(app *v1alpha1.Application) *v1alpha1.SyncPolicyAutomated {
	if app.Spec.SyncPolicy == nil {
		return nil
	}
	return app.Spec.SyncPolicy.Automated
}

// automatedSync is the operation an automated sync of app runs, and false
// when app is not automated.
func automatedSync(app *v1alpha1.Application) (v1alpha1.SyncOperation, bool) {
	auto := automated(app)
	if auto == nil {
		return v1alpha1.SyncOperation{}, false
	}
	return v1alpha1.SyncOperation{Prune: auto.Prune}, true
}

func appKey(namespace, name string) string { return namespace + "/" + name }

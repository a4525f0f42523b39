package apps

import (
	"context"
	"log/slog"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/apps/gitpush"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// FileOptions configure NewFile. Snapshot and Runner are required.
type FileOptions struct {
	// Snapshot returns the current policy snapshot (nil before the first
	// load): its Applications and deputy.dev AppProjects.
	Snapshot func() *policy.Snapshot
	// ProjectNamespaces are where an Application's AppProject is looked up
	// (sync.projectNamespaces; policy.ResolveAppProject).
	ProjectNamespaces []string
	// Runner runs operations (the Engine).
	Runner syncer.Runner
	// Differ computes diffs (the Engine); nil: Diff answers
	// ErrDiffUnavailable.
	Differ syncer.Differ
	// Workers bounds the operations running at once (sync.parallelism),
	// and apart from them the diffs; 0 means DefaultWorkers.
	Workers int
	// Logger receives every operation's audit line and engine faults.
	// Default: discard.
	Logger *slog.Logger
	// Metrics, if set, counts the operations' attempts and reports the
	// Applications of the snapshot (NewMetrics).
	Metrics *Metrics
}

// File is deputy's Applications in file mode: the Applications and
// AppProjects of the policy snapshot, synced by this process's operations
// queue; states live in memory. It implements Applications.
type File struct {
	current  func() *policy.Snapshot
	projects ProjectResolver
	ops      *Operations
	diffs    *diffGate
}

var _ Applications = (*File)(nil)

// NewFile returns file mode's Applications; Shutdown stops its queue. A
// retry (spec.syncPolicy.retry) runs with the Application and AppProject of
// the snapshot current then; it is cancelled when the Application is no
// longer in the snapshot.
func NewFile(opts FileOptions) *File {
	f := &File{current: opts.Snapshot, projects: snapshotProjects(opts.Snapshot, opts.ProjectNamespaces),
		diffs: newDiffGate(opts.Differ, opts.Workers)}
	f.ops = NewOperations(opts.Runner, OperationsOptions{Workers: opts.Workers, Logger: opts.Logger, Metrics: opts.Metrics,
		BeforeRetry: f.retryTarget})
	opts.Metrics.observe(f)
	return f
}

// retryTarget is the Application namespace/name and its AppProject as the
// current snapshot has them (OperationsOptions.BeforeRetry).
func (f *File) retryTarget(namespace, name string) (*v1alpha1.Application, *v1alpha1.AppProject, error) {
	app, err := f.Application(namespace, name)
	if err != nil || app == nil {
		return nil, nil, err
	}
	project, err := f.projects(app)
	if err != nil {
		return nil, nil, err
	}
	return app, project, nil
}

// Application implements Applications.
func (f *File) Application(namespace, name string) (*v1alpha1.Application, error) {
	snap := f.current()
	if snap == nil {
		return nil, policy.ErrNotLoaded
	}
	a := snap.Application(namespace, name)
	if a == nil {
		return nil, nil
	}
	return a.Object, nil
}

// List implements PushTargets: the Applications of the policy snapshot.
func (f *File) List() ([]*v1alpha1.Application, error) {
	snap := f.current()
	if snap == nil {
		return nil, policy.ErrNotLoaded
	}
	out := make([]*v1alpha1.Application, 0, len(snap.Applications))
	for _, a := range snap.Applications {
		out = append(out, a.Object)
	}
	return out, nil
}

// AppProject implements Applications.
func (f *File) AppProject(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
	return f.projects(app)
}

// Start implements Applications: the operations queue runs the sync (see
// Operations.Start).
func (f *File) Start(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, op v1alpha1.SyncOperation, initiatedBy v1alpha1.InitiatedBy) (*v1alpha1.OperationState, error) {
	return f.ops.Start(ctx, app, project, op, initiatedBy)
}

// Diff implements Applications: at most Workers diffs at once.
func (f *File) Diff(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, op v1alpha1.SyncOperation, objects []*unstructured.Unstructured) (*v1alpha1.ApplicationDiff, error) {
	return f.diffs.diff(ctx, app, project, op, objects)
}

// Trigger implements PushTargets: an automated app is synced by the queue,
// governed by its AppProject as AppProject resolves it now.
//
// Errors: AppProject's, and Start's.
func (f *File) Trigger(ctx context.Context, app *v1alpha1.Application, push gitpush.Push) error {
	op, ok := automatedSync(app)
	if !ok {
		return nil
	}
	project, err := f.projects(app)
	if err != nil {
		return err
	}
	_, err = f.ops.Start(ctx, app, project, op, initiatedBy(push))
	return err
}

// ApplicationStatus implements Applications (Operations.ApplicationStatus).
func (f *File) ApplicationStatus(namespace, name string) v1alpha1.ApplicationStatus {
	return f.ops.ApplicationStatus(namespace, name)
}

// Watch implements Applications (Operations.Watch).
func (f *File) Watch(ctx context.Context, namespace, name string) <-chan v1alpha1.OperationEvent {
	return f.ops.Watch(ctx, namespace, name)
}

// Running reports whether an operation of the Application runs.
func (f *File) Running(namespace, name string) bool { return f.ops.Running(namespace, name) }

// Shutdown stops taking operations and waits for the running ones, as
// Operations.Shutdown does.
//
// Errors: Operations.Shutdown's.
func (f *File) Shutdown(ctx context.Context) error { return f.ops.Shutdown(ctx) }

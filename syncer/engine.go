package syncer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/syncer/livestate"
	"deputy.dev/deputy/syncer/source"
)

// DefaultParallelism is how many objects of one apply group (and how many
// permission checks) are in flight at once unless EngineOptions says
// otherwise.
const DefaultParallelism = 8

// DefaultHealthTimeout is EngineOptions.HealthTimeout's default.
const DefaultHealthTimeout = 5 * time.Minute

// InClusterServer and InClusterName are how Argo CD (and deputy) name the
// cluster deputy runs in.
const (
	InClusterServer = cluster.InClusterServer
	InClusterName   = cluster.InClusterName
)

// Clusters resolves Application destinations. Both methods return the
// controller identity's view: the Engine adds impersonation itself.
type Clusters interface {
	// ServerForName returns the server URL of the cluster registered as
	// name (spec.destination.name).
	ServerForName(ctx context.Context, name string) (string, error)
	// RESTConfig returns a client config of the controller identity (deputy's
	// own) for the cluster at server. The Engine copies it and never changes
	// the original.
	RESTConfig(ctx context.Context, server string) (*rest.Config, error)
}

// ImpersonationSettings are Argo CD's application.sync.impersonation
// settings. Enabled is false by default upstream and Enforced true; the
// zero value here is (false, false), so callers apply those defaults (the
// configuration file does).
type ImpersonationSettings struct {
	// Enabled makes every sync run as the ServiceAccount its AppProject
	// derives (destinationServiceAccounts).
	Enabled bool
	// Enforced fails a sync for which no entry matches; when false such a
	// sync runs as the controller identity and its status says so.
	Enforced bool
}

// EngineOptions configure NewEngine.
type EngineOptions struct {
	// Clusters resolves destinations and gives the controller identity's
	// client configs. Required.
	Clusters Clusters
	// Impersonation decides whether syncs impersonate the derived
	// ServiceAccount.
	Impersonation ImpersonationSettings
	// Source configures where manifests come from and how they are rendered
	// (package source): the repository cache and credentials, local
	// repositories, kustomize, and the limits of each fetch, render and
	// operation (Source.Limits.OperationTimeout bounds Run and
	// DeleteResources).
	Source source.Options
	// HealthTimeout bounds the wait for the resources of one wave to become
	// healthy (hooks: to complete) when neither the operation nor the
	// Application's spec.syncPolicy.healthTimeout sets one. Default
	// DefaultHealthTimeout.
	HealthTimeout time.Duration
	// Parallelism bounds the requests in flight inside one apply group, and
	// the permission checks of the preflight. Default DefaultParallelism.
	Parallelism int
	// Logger receives one line per operation naming who impersonates whom,
	// and the outcome. The zero Logger discards.
	Logger logr.Logger
	// Now is the clock of StartedAt and FinishedAt (tests); default time.Now.
	Now func() time.Time
	// OnLiveChange is called with an Application's namespace and name when
	// an object it tracks changes in a watched destination scope (Compare's
	// live-state cache: added, deleted, or written by someone other than a
	// controller writing its status). It must not block. Optional.
	OnLiveChange func(namespace, name string)
}

// Engine runs sync operations: render from Git, check against the
// AppProject, derive the ServiceAccount, preflight, server-side apply and
// prune, every cluster request made as the derived ServiceAccount. It is
// safe for concurrent use; one Application should have one operation at a
// time (the operations queue ensures it).
type Engine struct {
	opts EngineOptions
	// sources fetches and renders Applications' sources.
	sources *source.Cache

	// controllerNames caches, per cluster server, the username of the
	// controller identity (for the "X is impersonating Y" log line).
	controllerNames sync.Map
	// live is Compare's view of the destinations (metadata informers per
	// scope, as each identity); renders and comparers cache its renders and
	// clients.
	live      *livestate.Cache
	renders   *source.RenderCache
	comparers clientCache
	// watching is, per Application, the scopes its last comparison read:
	// a change seen elsewhere is not its own (liveChanged).
	watching livestate.Interests
}

var _ Runner = (*Engine)(nil)

// NewEngine checks opts, fills their defaults (DefaultParallelism, and
// source.New's) and builds the source cache (creating its directory).
//
// Errors: Clusters is nil, or source.New's (naming the option).
func NewEngine(opts EngineOptions) (*Engine, error) {
	if opts.Clusters == nil {
		return nil, errors.New("syncer: EngineOptions.Clusters is required")
	}
	sources, err := source.New(opts.Source)
	if err != nil {
		return nil, err
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = DefaultParallelism
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = DefaultHealthTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Source.Limits = sources.Limits()
	e := &Engine{opts: opts, sources: sources, renders: source.NewRenderCache()}
	e.live, err = livestate.New(livestate.Options{NewClient: e.liveClient, TrackingAnnotation: TrackingAnnotation,
		OnChange: e.liveChanged, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// RunLiveState runs Compare's live-state cache until ctx ends (it stops
// scopes no comparison asked for within livestate's idle timeout), then
// stops every watch. Compare works without it, but scopes are never
// stopped.
func (e *Engine) RunLiveState(ctx context.Context) { e.live.Run(ctx) }

// ResolveRevisions implements RevisionResolver: the commit SHAs the
// targetRevisions of app's sources point at now, one per source
// (source.Cache.ResolveRevision: fetched as a sync fetches, within the same
// limits), once every source passed the checks a sync makes before any
// fetch (checkSources: spec.sources' rules, supported, permitted by
// project's sourceRepos).
func (e *Engine) ResolveRevisions(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject) ([]string, error) {
	c, err := policy.CompileAppProject(project)
	if err != nil {
		return nil, fmt.Errorf("%w: fix the AppProject", err)
	}
	if err := checkSources(c, app); err != nil {
		return nil, err
	}
	srcs := app.Spec.GetSources()
	out := make([]string, len(srcs))
	for i, src := range srcs {
		if out[i], err = e.sources.ResolveRevision(ctx, src); err != nil {
			if app.Spec.HasMultipleSources() {
				return nil, fmt.Errorf("%s: %w", source.DescribeSource(&app.Spec, i), err)
			}
			return nil, err
		}
	}
	return out, nil
}

// Run implements Runner: it runs one sync operation to completion and
// returns its final state (never nil, never Running; it never panics).
//
// The whole operation runs within EngineOptions.Source.Limits.
// OperationTimeout: an operation that reaches it ends in Error with a
// message naming sync.limits.operationTimeout.
func (e *Engine) Run(ctx context.Context, req Request, progress Progress) (final *v1alpha1.OperationState) {
	op := e.newOperation(req, progress)
	opCtx, cancel := context.WithTimeout(ctx, e.opts.Source.Limits.OperationTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			op.log.Error(fmt.Errorf("panic: %v", r), "sync engine panicked; the operation ends in Error")
			op.fail(fmt.Errorf("internal error in deputy's sync engine: %v", r))
		}
		e.timedOut(ctx, opCtx, op)
		final = op.finish()
	}()
	op.sync(opCtx)
	return nil // replaced by the deferred finish
}

// timedOut turns an operation that reached the operation timeout (and not
// its caller's end) into an Error naming sync.limits.operationTimeout,
// keeping what it had said.
func (e *Engine) timedOut(parent, opCtx context.Context, op *operation) {
	if !errors.Is(opCtx.Err(), context.DeadlineExceeded) || parent.Err() != nil {
		return
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.done {
		return
	}
	msg := fmt.Sprintf("the operation did not finish within %s (%s): it was stopped", e.opts.Source.Limits.OperationTimeout, source.FieldOperationTimeout)
	if op.state.Message != "" {
		msg += "; " + op.state.Message
	}
	op.state.Phase, op.state.Message = v1alpha1.OperationError, msg
}

// DeleteOptions configure DeleteResources.
type DeleteOptions struct {
	// PropagationPolicy is every delete's propagationPolicy: Background
	// (the default when empty) or Foreground (an object stays, with the
	// foregroundDeletion finalizer, until kube-controller-manager's garbage
	// collector removed its dependents; for ever where none runs).
	PropagationPolicy metav1.DeletionPropagation
}

// DeleteResources deletes every object tracked as belonging to app (its
// TrackingAnnotation value), looking at the kinds and namespaces its last
// operation recorded and those its source renders now (when it still
// renders), in the destination namespace too, as the ServiceAccount the
// project derives: the derivation, the enforcement and the preflight are the
// same as for a sync. Each delete uses opts.PropagationPolicy; then it waits
// (within the health timeout, as between prune's waves) until the deleted
// objects are gone, and lists again: an object still there (a finalizer
// holds it) is a failed result. The returned state's phase is Succeeded
// when every tracked object is gone (results say Pruned), Failed when some
// deletion failed or an object remains, Error when the operation could not
// run (its message names why: the enforcement, the missing ServiceAccount,
// the preflight's missing permissions); its Operation is empty.
func (e *Engine) DeleteResources(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, opts DeleteOptions) (final *v1alpha1.OperationState) {
	op := e.newOperation(Request{Application: app, Project: project}, nil)
	op.state.Operation = v1alpha1.Operation{}
	op.options.propagation = cmp.Or(opts.PropagationPolicy, metav1.DeletePropagationBackground)
	opCtx, cancel := context.WithTimeout(ctx, e.opts.Source.Limits.OperationTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			op.log.Error(fmt.Errorf("panic: %v", r), "sync engine panicked while deleting; the operation ends in Error")
			op.fail(fmt.Errorf("internal error in deputy's sync engine: %v", r))
		}
		e.timedOut(ctx, opCtx, op)
		final = op.finish()
	}()
	op.deleteAll(opCtx)
	return nil
}

// identity is who the cluster sees for one operation.
type identity struct {
	// username is the impersonated ServiceAccount's username; "" means the
	// controller identity itself.
	username string
	// status is OperationState.Identity.
	status string
	// reason says why, for logs: the deciding project entry, or why there is
	// no impersonation.
	reason string
}

// deriveIdentity applies the derivation (Argo CD
// DeriveServiceAccountToImpersonate through policy.CompiledProject.Derive)
// and the impersonation settings. server is the resolved destination server.
func (e *Engine) deriveIdentity(c *policy.CompiledProject, app *v1alpha1.Application, server string) (identity, error) {
	if !e.opts.Impersonation.Enabled {
		return identity{status: ControllerIdentityImpersonationDisabled, reason: "impersonation is disabled"}, nil
	}
	dest := app.Spec.Destination
	username, entry, err := c.Derive(server, dest.Namespace, app.Namespace)
	if err != nil {
		return identity{}, fmt.Errorf("failed to derive the ServiceAccount to impersonate from AppProject %q (destinationServiceAccounts[%d]): %w", c.Name(), entry, err)
	}
	if username == "" {
		if e.opts.Impersonation.Enforced {
			return identity{}, policy.EnforcedServiceAccountError(dest.Server, cmp.Or(dest.Namespace, app.Namespace))
		}
		return identity{status: ControllerIdentity, reason: "no destinationServiceAccounts entry matches and impersonation is not enforced"}, nil
	}
	return identity{username: username, status: username, reason: fmt.Sprintf("AppProject %q destinationServiceAccounts[%d]", c.Name(), entry)}, nil
}

// controllerName returns the controller identity's username on server
// (a SelfSubjectReview, cached), or a placeholder when it cannot be known.
func (e *Engine) controllerName(ctx context.Context, server string, cs kubernetes.Interface) string {
	if v, ok := e.controllerNames.Load(server); ok {
		return v.(string)
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || r.Status.UserInfo.Username == "" {
		return "the controller identity"
	}
	e.controllerNames.Store(server, r.Status.UserInfo.Username)
	return r.Status.UserInfo.Username
}

package syncer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// DefaultParallelism is how many objects of one apply group (and how many
// permission checks) are in flight at once unless EngineOptions says
// otherwise.
const DefaultParallelism = 8

// InClusterServer and InClusterName are how Argo CD (and deputy) name the
// cluster deputy runs in.
const (
	InClusterServer = "https://kubernetes.default.svc"
	InClusterName   = "in-cluster"
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

// StaticClusters is a Clusters of one cluster: the one deputy runs in (or
// the one a kubeconfig names), registered as Name at Server.
type StaticClusters struct {
	// Name defaults to InClusterName, Server to InClusterServer.
	Name, Server string
	// Config is the controller identity's client config for that cluster
	// (rest.InClusterConfig, or one loaded from a kubeconfig).
	Config *rest.Config
}

var _ Clusters = StaticClusters{}

func (s StaticClusters) name() string   { return cmpOr(s.Name, InClusterName) }
func (s StaticClusters) server() string { return cmpOr(s.Server, InClusterServer) }

// ServerForName implements Clusters.
func (s StaticClusters) ServerForName(_ context.Context, name string) (string, error) {
	if name != s.name() {
		return "", fmt.Errorf("cluster %q is not registered with deputy (known: %q): set spec.destination.name to it, or spec.destination.server to %s", name, s.name(), s.server())
	}
	return s.server(), nil
}

// RESTConfig implements Clusters.
func (s StaticClusters) RESTConfig(_ context.Context, server string) (*rest.Config, error) {
	if server != s.server() {
		return nil, fmt.Errorf("cluster %s is not registered with deputy (known: %s): set spec.destination.server to it", server, s.server())
	}
	if s.Config == nil {
		return nil, errors.New("the cluster registry has no client config")
	}
	return rest.CopyConfig(s.Config), nil
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
	// RepoCredentials are the HTTPS credentials of Git repositories (see
	// RepoCredential for how one is matched to a repository URL).
	RepoCredentials []RepoCredential
	// Secrets reads the Secrets that RepoCredentials name.
	Secrets SecretGetter
	// CacheDir holds the clones of https repositories (bare mirrors, one per
	// exact repository URL, fetched on every sync). Required; created when
	// missing.
	CacheDir string
	// LocalRepositories are the absolute directories under which local
	// repositories (file:// URLs and absolute paths) may be opened
	// (config sync.localRepositories); every file access of such a
	// repository stays inside the directory that holds it. Empty: every
	// local repository is refused, naming sync.localRepositories. A
	// directory that is, contains or is inside CacheDir is refused by
	// NewEngine.
	LocalRepositories []string
	// Kustomize configures kustomize builds (remote resources are off by
	// default).
	Kustomize KustomizeOptions
	// Limits bound each operation; zero fields take DefaultLimits.
	Limits Limits
	// Parallelism bounds the requests in flight inside one apply group, and
	// the permission checks of the preflight. Default DefaultParallelism.
	Parallelism int
	// Logger receives one line per operation naming who impersonates whom,
	// and the outcome. The zero Logger discards.
	Logger logr.Logger
	// Now is the clock of StartedAt and FinishedAt (tests); default time.Now.
	Now func() time.Time
}

// Engine runs sync operations: render from Git, check against the
// AppProject, derive the ServiceAccount, preflight, server-side apply and
// prune, every cluster request made as the derived ServiceAccount. It is
// safe for concurrent use; one Application should have one operation at a
// time (the operations queue ensures it).
type Engine struct {
	opts  EngineOptions
	repos *repoCache

	// controllerNames caches, per cluster server, the username of the
	// controller identity (for the "X is impersonating Y" log line).
	controllerNames sync.Map
}

var _ Runner = (*Engine)(nil)

// NewEngine checks opts and creates the cache directory.
func NewEngine(opts EngineOptions) (*Engine, error) {
	if opts.Clusters == nil {
		return nil, errors.New("syncer: EngineOptions.Clusters is required")
	}
	if opts.CacheDir == "" {
		return nil, errors.New("syncer: EngineOptions.CacheDir is required")
	}
	if err := os.MkdirAll(opts.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("syncer: failed to create the cache directory: %w", err)
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = DefaultParallelism
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Limits = opts.Limits.withDefaults()
	if opts.Kustomize.RemoteTimeout <= 0 {
		opts.Kustomize.RemoteTimeout = DefaultKustomizeRemoteTimeout
	}
	local, err := checkLocalRepositories(opts.LocalRepositories, opts.CacheDir)
	if err != nil {
		return nil, err
	}
	for i, c := range opts.RepoCredentials {
		if c.URL == "" {
			return nil, fmt.Errorf("syncer: RepoCredentials[%d].URL is empty", i)
		}
		if _, err := parseCredentialScope(c.URL); err != nil {
			return nil, fmt.Errorf("syncer: RepoCredentials[%d].URL %q: %w (use https://HOST[:PORT][/PATH])", i, c.URL, err)
		}
		if c.Secret == nil && (c.UsernameFile == "" || c.PasswordFile == "") {
			return nil, fmt.Errorf("syncer: RepoCredentials[%d] (%s) needs usernameFile and passwordFile, or a Secret", i, c.URL)
		}
		if c.Secret != nil && opts.Secrets == nil {
			return nil, fmt.Errorf("syncer: RepoCredentials[%d] (%s) names a Secret but EngineOptions.Secrets is nil", i, c.URL)
		}
	}
	installGitTransport()
	// kustomize's remote loading is set up by each render worker
	// (configureKustomizeRemote), not here: no render runs in this process.
	return &Engine{opts: opts, repos: &repoCache{dir: opts.CacheDir, creds: opts.RepoCredentials, secrets: opts.Secrets,
		local: local, limits: opts.Limits, kustomize: opts.Kustomize}}, nil
}

// checkLocalRepositories cleans the allowed local repository directories
// and refuses a relative one, or one that is, contains or is inside the
// cache directory (deputy's mirrors of every tenant's repositories).
func checkLocalRepositories(dirs []string, cacheDir string) ([]string, error) {
	cache, err := filepath.Abs(cacheDir)
	if err != nil {
		return nil, fmt.Errorf("syncer: failed to make the cache directory absolute: %w", err)
	}
	realCache := cache
	if r, err := filepath.EvalSymlinks(cache); err == nil {
		realCache = r
	}
	out := make([]string, 0, len(dirs))
	for i, d := range dirs {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("syncer: LocalRepositories[%d] %q is not an absolute directory", i, d)
		}
		d = filepath.Clean(d)
		real := d
		if r, err := filepath.EvalSymlinks(d); err == nil {
			real = r
		}
		if within(d, cache) || within(cache, d) || within(real, realCache) || within(realCache, real) {
			return nil, fmt.Errorf("syncer: LocalRepositories[%d] %q overlaps the cache directory %s (%s): list directories that hold only Git repositories", i, d, cache, FieldLocalRepositories)
		}
		out = append(out, d)
	}
	return out, nil
}

// Run implements Runner: it runs one sync operation to completion and
// returns its final state (never nil, never Running; it never panics).
//
// The whole operation runs within Limits.OperationTimeout: an operation
// that reaches it ends in Error with a message naming
// sync.limits.operationTimeout.
func (e *Engine) Run(ctx context.Context, req Request, progress Progress) (final *v1alpha1.OperationState) {
	op := e.newOperation(req, progress)
	opCtx, cancel := context.WithTimeout(ctx, e.opts.Limits.OperationTimeout)
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
	msg := fmt.Sprintf("the operation did not finish within %s (%s): it was stopped", e.opts.Limits.OperationTimeout, FieldOperationTimeout)
	if op.state.Message != "" {
		msg += "; " + op.state.Message
	}
	op.state.Phase, op.state.Message = v1alpha1.OperationError, msg
}

// DeleteResources deletes every object tracked as belonging to app (its
// TrackingAnnotation value), looking at the kinds and namespaces its last
// operation recorded and those its source renders now (when it still
// renders), in the destination namespace too, as the ServiceAccount the
// project derives: the derivation, the enforcement and the preflight are the
// same as for a sync. The returned state's phase is Succeeded when every
// tracked object is gone (results say Pruned), Failed when some deletion
// failed, Error when the operation could not run; its Operation is empty.
func (e *Engine) DeleteResources(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject) (final *v1alpha1.OperationState) {
	op := e.newOperation(Request{Application: app, Project: project}, nil)
	op.state.Operation = v1alpha1.Operation{}
	opCtx, cancel := context.WithTimeout(ctx, e.opts.Limits.OperationTimeout)
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
			return identity{}, policy.EnforcedServiceAccountError(dest.Server, cmpOr(dest.Namespace, app.Namespace))
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

package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	kauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/examples"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/tokenreview"
)

// Serving describes what Run resolved from the configuration, for the
// startup hints `deputy serve` prints.
type Serving struct {
	Addr net.Addr
	// CertDir is set when certificates come from (or were generated in) a
	// certificate directory.
	CertDir string
	// GeneratedCerts is true when Run created certificates at start.
	GeneratedCerts bool
	// ClientCAFile is the client CA in use, "" when client certificates are
	// not required.
	ClientCAFile string
	// EmbeddedPolicy is true when the built-in example policy is served.
	EmbeddedPolicy bool
}

// Run is deputy's composition root for `deputy serve`: it resolves
// certificates (generating development ones in cfg.TLS.CertDir when none
// exist), starts the policy source, builds the authorizer, token reviewer and
// admission handler, and serves until ctx ends. cfg must be defaulted and
// valid (config.SetDefaults, config.Validate). ready, if not nil, is called
// once the server listens.
//
// Errors: certificates cannot be generated or loaded, the client CA cannot be
// read, or the server fails (see Server.Run). A policy that fails to load is
// not an error: deputy serves with /readyz red and answers no request with
// Allow until a policy loads.
func Run(ctx context.Context, cfg *config.DeputyConfiguration, log *slog.Logger, ready func(Serving)) error {
	serving := Serving{}
	certFile, keyFile := cfg.TLS.CertFile, cfg.TLS.KeyFile
	clientCA := cfg.TLS.ClientCAFile
	allowedNames := cfg.TLS.AllowedClientNames
	if certFile == "" {
		dir := cfg.TLS.CertDir
		serving.CertDir = dir
		certFile, keyFile = filepath.Join(dir, certs.ServingCertFile), filepath.Join(dir, certs.ServingKeyFile)
		if !fileExists(certFile) || !fileExists(keyFile) {
			res, err := certs.Init(dir, certs.InitOptions{})
			if err != nil {
				return fmt.Errorf("failed to generate development certificates in %s: %w", dir, err)
			}
			serving.GeneratedCerts = res.Changed()
			log.Info("generated development certificates", "dir", dir, "hosts", res.Hosts)
		}
		if clientCA == "" && fileExists(filepath.Join(dir, certs.CACertFile)) {
			clientCA = filepath.Join(dir, certs.CACertFile)
			if len(allowedNames) == 0 {
				allowedNames = []string{config.DefaultClientName}
			}
		}
	}
	serving.ClientCAFile = clientCA

	metrics := NewMetrics()
	source, embedded := newPolicySource(cfg, log, metrics)
	serving.EmbeddedPolicy = embedded
	if err := source.Load(); err != nil {
		log.Error("initial policy load failed; serving with /readyz red until it loads", "error", err.Error())
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if err := source.Run(runCtx); err != nil {
			log.Error("policy watcher stopped; changes will not be picked up", "error", err.Error())
		}
	}()

	// Cluster mode: the cluster's RBAC objects and AppProjects, read through
	// informers, feed the impersonation gate next to the policy files.
	readiness := []ReadinessCheck{{Name: "policy", Check: policyReady(source)}}
	// gate is set below; the sources rebuild its index eagerly on change so
	// the first request after a change does not pay for it.
	var gate atomic.Pointer[authorizer.Gate]
	var clusterState authorizer.ClusterStateFunc
	var clusterRESTConfig *rest.Config // cluster mode: deputy's own identity
	var refreshResources func()        // cluster mode: ask discovery again
	var cluster *policy.ClusterSource
	// The Application controller (cluster mode) runs while the Application
	// CRD is served: the cluster source tracks it and tells the controller.
	var controllerRef atomic.Pointer[syncer.Controller]
	if cfg.Cluster.Kubeconfig != "" || cfg.Cluster.InCluster {
		restCfg, err := ClusterRESTConfig(cfg.Cluster)
		if err != nil {
			return err
		}
		cluster, err = policy.NewClusterSource(restCfg, policy.ClusterSourceOptions{Logger: log, OnChange: func(*policy.ClusterState) {
			if g := gate.Load(); g != nil {
				g.Refresh()
			}
		},
			Resources: []schema.GroupVersionResource{syncer.ApplicationsResource},
			OnServedChange: func() {
				if c := controllerRef.Load(); c != nil {
					c.ApplicationsServedChanged()
				}
			}})
		if err != nil {
			return err
		}
		log.Info("cluster mode: reading RBAC objects and AppProjects from the cluster", "server", restCfg.Host)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = cluster.Run(runCtx) // fails only when run twice
		}()
		defer func() { cancel(); <-done }()
		clusterState = cluster.Current
		clusterRESTConfig = restCfg
		refreshResources = cluster.RefreshResources
		readiness = append(readiness, ReadinessCheck{Name: "cluster", Check: clusterReady(cluster)})
	}

	var clientAuth *ClientCertAuth
	var clientCAVerify x509request.VerifyOptionFunc
	if clientCA != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", clientCA)
		if err != nil {
			return fmt.Errorf("failed to load client CA %s (tls.clientCAFile / --client-ca-file): %w", clientCA, err)
		}
		go ca.Run(runCtx, 1)
		clientAuth = NewClientCertAuth(ca.VerifyOptions, allowedNames, log)
		clientCAVerify = ca.VerifyOptions
	}

	decision, err := authorizer.ParseDefaultDecision(cfg.Authorization.DefaultDecision)
	if err != nil {
		return err
	}
	if decision == authorizer.DefaultDeny {
		// deputy's denial is final: the policy must grant what
		// kube-apiserver's bootstrap policy grants every client.
		warnBootstrap := func(s *policy.Snapshot) {
			for _, m := range authorizer.MissingBootstrapGrants(s) {
				log.Warn("authorization.defaultDecision is Deny and the policy lacks a bootstrap grant ordinary clients need; add it from "+authorizer.BootstrapFile,
					"clusterRole", m.Grant.ClusterRole.Name, "denied", strings.Join(m.Denied, "; "))
			}
		}
		warnBootstrap(source.Current())
		source.OnChange(warnBootstrap)
	}
	gateOpts, err := authorizer.GateOptionsFrom(cfg.Authorization.Impersonation)
	if err != nil {
		return err
	}
	gateOpts.RefreshResources = refreshResources
	gate.Store(authorizer.NewGate(gateOpts, source.Current, clusterState))
	source.OnChange(func(*policy.Snapshot) { gate.Load().Refresh() })
	// The gate goes first: its Deny of an impersonation must be final.
	authz, err := authorizer.New(authorizer.Options{Default: decision},
		union.NamedAuthorizer{AuthorizerName: "impersonation-gate", Authorizer: gate.Load()},
		union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: authorizer.NewRBAC(source.Current)})
	if err != nil {
		return err
	}
	// Token authentication: the webhook chain (token file, project tokens,
	// OIDC) answers /authenticate; deputy's API uses the API chain, which adds
	// the cached, delegated TokenReview of cluster mode. Never delegate from
	// /authenticate: kube-apiserver's TokenReview calls deputy's webhook.
	projectRoles := tokenreview.SnapshotProjectRoles(source.Current)
	if clusterState != nil {
		projectRoles = tokenreview.ClusterProjectRoles(clusterState) // where the API finds AppProjects too
	}
	chains, err := tokenreview.NewFromConfig(runCtx, cfg.Authentication, tokenreview.Options{
		ClusterConfig: clusterRESTConfig,
		StaticTokens:  func() *policy.TokenSet { return source.Current().TokenSetOf() },
		ProjectRoles:  projectRoles,
		Registerer:    metrics.Registry,
		OnRevocationReload: func(file string, revoked int, err error) {
			if err != nil {
				log.Error("project token revocation list not reloaded; the last one stays in force", "file", file, "error", err.Error())
				return
			}
			log.Info("project token revocation list reloaded", "file", file, "revoked", revoked)
		},
	})
	if err != nil {
		return err
	}
	tokens := chains.API // deputy's API (NewAPIAuthenticator below)
	reviewer := tokenreview.NewReviewer(chains.Webhook, cfg.Authentication.APIAudiences)

	// Syncs: the operations queue over the sync engine, triggered through
	// deputy's own API, whose callers are authenticated by the same token
	// chain (and client certificates of the client CA) and authorized by the
	// same authorizer as /authorize.
	runner, revisions := newSyncRunner(cfg, log)
	var syncs SyncService
	var apps ApplicationStore
	var pushTargets gitPushTargets
	// stopSyncs (the server's BeforeStop) drains the syncs, and in cluster
	// mode releases the sync Lease, while deputy still answers its webhooks:
	// kube-apiserver may ask deputy to authorize those very requests
	// (impersonated writes, the Lease update).
	var stopSyncs func()
	if clusterRESTConfig != nil {
		// Cluster mode: Applications live in the cluster; a sync requested
		// here is recorded on the Application and the leader runs it.
		controller, err := newController(cfg, clusterRESTConfig, runner, revisions, clusterState,
			func() (bool, bool) { return cluster.Served(syncer.ApplicationsResource) }, log)
		if err != nil {
			return err
		}
		controllerRef.Store(controller)
		controllerDone := make(chan struct{})
		go func() {
			defer close(controllerDone)
			if err := controller.Run(runCtx); err != nil {
				log.Error("the Application controller stopped; this replica runs no operations", "error", err.Error())
			}
		}()
		// runCtx ends with ctx: the controller drains and releases the Lease
		// while the server waits in BeforeStop. On an early return, stop it
		// here.
		stopSyncs = func() { <-controllerDone }
		defer func() { cancel(); <-controllerDone }()
		syncs = controller
		apps = ClusterApplications(controller, ClusterProjects(clusterState, cfg.Sync.ProjectNamespaces))
		pushTargets = gitPushTargets{list: controller.Applications, trigger: func(ctx context.Context, app *v1alpha1.Application, push PushEvent) error {
			return controller.Trigger(ctx, app, v1alpha1.InitiatedBy{Username: push.initiator()})
		}}
	} else {
		ops := syncer.NewOperations(runner, syncer.OperationsOptions{Workers: cfg.Sync.Parallelism, Logger: log})
		var drained sync.Once
		stopSyncs = func() {
			drained.Do(func() {
				drainCtx, cancel := context.WithTimeout(context.Background(), cfg.Shutdown.GracePeriod.Duration)
				defer cancel()
				if err := ops.Shutdown(drainCtx); err != nil {
					log.Error("sync operations did not finish before shutdown", "error", err.Error())
				}
			})
		}
		defer stopSyncs() // an early return
		syncs = ops
		apps = SnapshotApplications(source.Current, cfg.Sync.ProjectNamespaces)
		pushTargets = fileGitPushTargets(source.Current, cfg.Sync.ProjectNamespaces, ops)
	}
	apiAuthn, requestHeader, err := newAPIAuthentication(runCtx, cfg.API, tokens, clientCAVerify)
	if err != nil {
		return err
	}
	var delegated kauthorizer.Authorizer
	if cfg.API.DelegatedAuthorization {
		if delegated, err = newDelegatedAuthorizer(clusterRESTConfig); err != nil {
			return err
		}
	}
	apiAuthz, err := NewAPIAuthorizer(NewProjectScopeAuthorizer(apps), authz, delegated)
	if err != nil {
		return err
	}
	api := NewAPIHandler(APIOptions{
		Authenticator:   apiAuthn,
		RequestHeader:   requestHeader,
		APIAudiences:    cfg.Authentication.APIAudiences,
		Authorizer:      apiAuthz,
		AggregatedGroup: cfg.API.AggregatedGroup,
		Ready: func() error {
			if source.Current() == nil {
				return errors.New("deputy has not loaded its policy yet")
			}
			return nil
		},
		Applications: apps,
		Operations:   syncs,
		Log:          log,
	})

	gitHook, err := NewGitWebhookHandler(GitWebhookOptions{Settings: cfg.Sync.Webhook, Applications: pushTargets.list,
		Trigger: pushTargets.trigger, Log: log, Metrics: metrics})
	if err != nil {
		return err
	}

	minTLS := uint16(tls.VersionTLS12)
	if cfg.TLS.MinVersion == "VersionTLS13" {
		minTLS = tls.VersionTLS13
	}
	srv := NewServer(ServerOptions{
		Listen:                       cfg.Listen,
		CertFile:                     certFile,
		KeyFile:                      keyFile,
		MinTLSVersion:                minTLS,
		ClientAuth:                   clientAuth,
		RequireClientCertForValidate: cfg.TLS.RequireClientCertForValidate,
		Authorize:                    &AuthorizeHandler{Authorizer: authz, Metrics: metrics, Log: log},
		Authenticate: &AuthenticateHandler{Reviewer: reviewer, Metrics: metrics, Log: log, APIAudiences: cfg.Authentication.APIAudiences,
			KnownToken: func(token string) (string, bool) {
				u, ok := source.Current().TokenSetOf().Lookup(token)
				if !ok {
					return "", false
				}
				return u.GetName(), true
			}},
		API:           api,
		GitWebhook:    gitHook,
		Validate:      NewValidateHandler(NewValidator(NewAppProjectValidator(true), NewImpersonationRBACValidator(cfg.Authorization.Impersonation.GateRBAC)), metrics, log),
		Readiness:     readiness,
		Metrics:       metrics,
		Log:           log,
		ShutdownDelay: cfg.Shutdown.Delay.Duration,
		GracePeriod:   cfg.Shutdown.GracePeriod.Duration,
		BeforeStop:    stopSyncs,
		OnListen: func(addr net.Addr) {
			if ready != nil {
				serving.Addr = addr
				ready(serving)
			}
		},
	})
	return srv.Run(ctx)
}

func newPolicySource(cfg *config.DeputyConfiguration, log *slog.Logger, m *Metrics) (*policy.FileSource, bool) {
	opts := policy.FileSourceOptions{
		PollInterval: cfg.Policy.PollInterval.Duration,
		Logger:       log,
		OnLoad: func(st policy.Status) {
			m.PolicyLoad(st.LastError == nil, st.Ready(), st.LastSuccess)
		},
	}
	if len(cfg.Policy.Paths) == 0 {
		opts.FS = examples.FS
		return policy.NewFileSource([]string{"."}, opts), true
	}
	return policy.NewFileSource(cfg.Policy.Paths, opts), false
}

// policyReady is the readiness check of a policy source: red before the first
// load and while the last reload failed, with the error (file, document).
func policyReady(s *policy.FileSource) func() error {
	return func() error {
		st := s.Status()
		switch {
		case !st.Loaded && st.LastError != nil:
			return fmt.Errorf("no policy loaded: %w", st.LastError)
		case !st.Loaded:
			return errors.New("no policy loaded yet")
		case st.LastError != nil:
			return fmt.Errorf("last reload failed at %s, serving the policy loaded at %s: %w",
				st.LastAttempt.UTC().Format("2006-01-02T15:04:05Z"), st.LastSuccess.UTC().Format("2006-01-02T15:04:05Z"), st.LastError)
		}
		return nil
	}
}

// ClusterRESTConfig builds the client configuration of cluster mode from
// cluster.kubeconfig (+ context) or the in-cluster ServiceAccount.
//
// Errors: the kubeconfig or in-cluster configuration cannot be loaded,
// naming the setting to fix.
func ClusterRESTConfig(c config.Cluster) (*rest.Config, error) {
	if c.InCluster {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("failed to load the in-cluster client configuration (cluster.inCluster / --in-cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: c.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load kubeconfig %s (cluster.kubeconfig / --kubeconfig, cluster.context / --context): %w", c.Kubeconfig, err)
	}
	return cfg, nil
}

// clusterReady is the readiness check of cluster mode: red until the
// cluster's RBAC objects and AppProjects have been listed (the gate denies
// impersonation until then) and while a list, watch or discovery call fails.
func clusterReady(s *policy.ClusterSource) func() error {
	return func() error {
		st := s.Status()
		switch {
		case !st.Synced && st.LastError != nil:
			return fmt.Errorf("cluster RBAC objects and AppProjects not synced: %w", st.LastError)
		case !st.Synced:
			return errors.New("cluster RBAC objects and AppProjects not synced yet")
		case st.LastError != nil:
			return fmt.Errorf("reading the cluster failed (last at %s), serving the state built at %s: %w",
				st.LastErrorTime.UTC().Format("2006-01-02T15:04:05Z"), st.LastBuild.UTC().Format("2006-01-02T15:04:05Z"), st.LastError)
		}
		return nil
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// newSyncRunner builds the sync engine from the configuration's sync
// section. An engine that cannot be built (its cache directory cannot be
// created, a Secret client cannot be made) does not stop deputy from serving
// its webhooks: every operation then fails with the reason, and the error is
// logged at start.
func newSyncRunner(cfg *config.DeputyConfiguration, log *slog.Logger) (syncer.Runner, syncer.RevisionResolver) {
	creds := make([]syncer.RepoCredential, 0, len(cfg.Sync.Repositories))
	needSecrets := false
	for _, r := range cfg.Sync.Repositories {
		c := syncer.RepoCredential{URL: r.URL, UsernameFile: r.UsernameFile, PasswordFile: r.PasswordFile}
		if r.Secret != nil {
			c.Secret = &syncer.SecretRef{Namespace: r.Secret.Namespace, Name: r.Secret.Name}
			needSecrets = true
		}
		creds = append(creds, c)
	}
	var secrets syncer.SecretGetter
	if needSecrets {
		// config.Validate requires cluster mode for Secret credentials.
		restCfg, err := ClusterRESTConfig(cfg.Cluster)
		if err == nil {
			var cs kubernetes.Interface
			if cs, err = kubernetes.NewForConfig(restCfg); err == nil {
				secrets = syncer.SecretsFromClient(cs)
			}
		}
		if err != nil {
			log.Error("sync engine not available: cannot read repository Secrets", "error", err.Error())
			u := unavailableRunner{reason: "cannot read the repository credential Secrets: " + err.Error()}
			return u, u
		}
	}
	engine, err := syncer.NewEngine(syncer.EngineOptions{
		Clusters:          newSyncClusters(cfg.Sync.Clusters, log),
		Impersonation:     syncer.ImpersonationSettings{Enabled: cfg.Sync.Impersonation.Enabled, Enforced: cfg.Sync.Impersonation.IsEnforced()},
		RepoCredentials:   creds,
		Secrets:           secrets,
		CacheDir:          cfg.Sync.CacheDir,
		LocalRepositories: cfg.Sync.LocalRepositories,
		Kustomize: syncer.KustomizeOptions{RemoteResources: cfg.Sync.Kustomize.RemoteResources,
			RemoteTimeout: cfg.Sync.Kustomize.RemoteTimeout.Duration},
		Limits: engineLimits(cfg.Sync.Limits),
		Logger: logr.FromSlogHandler(log.Handler()),
	})
	if err != nil {
		log.Error("sync engine not available", "error", err.Error())
		u := unavailableRunner{reason: err.Error()}
		return u, u
	}
	return engine, engine
}

// engineLimits maps config sync.limits onto the engine's Limits, field by
// field (TestEngineLimitsMapsEveryField keeps the two in step).
func engineLimits(l config.SyncLimits) syncer.Limits {
	return syncer.Limits{
		MaxFileBytes:     l.MaxFileBytes.Value(),
		MaxRenderBytes:   l.MaxRenderBytes.Value(),
		MaxFiles:         l.MaxFiles,
		MaxObjects:       l.MaxObjects,
		MaxRenderMemory:  l.MaxRenderMemory.Value(),
		MaxFetchBytes:    l.MaxFetchBytes.Value(),
		MaxFetchObjects:  l.MaxFetchObjects,
		OperationTimeout: l.OperationTimeout.Duration,
	}
}

// unavailableRunner ends every operation at once with an Error phase naming
// why the sync engine could not be built.
type unavailableRunner struct{ reason string }

func (u unavailableRunner) Run(_ context.Context, req syncer.Request, _ syncer.Progress) *v1alpha1.OperationState {
	now := metav1.Now()
	return &v1alpha1.OperationState{
		Operation:  v1alpha1.Operation{Sync: req.Sync.DeepCopy(), InitiatedBy: req.InitiatedBy},
		Phase:      v1alpha1.OperationError,
		Message:    "sync engine not available: " + u.reason + " (see deputy's log at start)",
		StartedAt:  now,
		FinishedAt: &now,
	}
}

// ResolveRevision implements syncer.RevisionResolver: it fails with the
// reason the engine is not available.
func (u unavailableRunner) ResolveRevision(context.Context, *v1alpha1.Application) (string, error) {
	return "", errors.New("sync engine not available: " + u.reason)
}

// syncClusters is the cluster registry of sync.clusters for the engine:
// destination names resolve to server URLs, server URLs to deputy's own
// client configuration for that cluster. Configurations are loaded once at
// start; a cluster whose kubeconfig does not load fails the syncs to it with
// that error instead of stopping deputy.
type syncClusters struct {
	names   map[string]string // name -> server
	configs map[string]clusterConfig
	known   string // for messages
}

type clusterConfig struct {
	cfg *rest.Config
	err error
}

func normalizeServer(s string) string { return strings.TrimRight(s, "/") }

func newSyncClusters(clusters []config.SyncCluster, log *slog.Logger) *syncClusters {
	r := &syncClusters{names: map[string]string{}, configs: map[string]clusterConfig{}}
	var known []string
	for _, c := range clusters {
		server := normalizeServer(c.Server)
		r.names[c.Name] = server
		restCfg, err := ClusterRESTConfig(config.Cluster{Kubeconfig: c.Kubeconfig, Context: c.Context, InCluster: c.InCluster})
		if err != nil {
			err = fmt.Errorf("sync.clusters %q: %w", c.Name, err)
			log.Error("cluster of the sync registry unusable; syncs to it will fail", "cluster", c.Name, "server", c.Server, "error", err.Error())
		}
		r.configs[server] = clusterConfig{cfg: restCfg, err: err}
		known = append(known, c.Name+" ("+server+")")
	}
	r.known = strings.Join(known, ", ")
	if r.known == "" {
		r.known = "none: add the cluster to sync.clusters in deputy's configuration"
	}
	return r
}

// ServerForName implements syncer.Clusters.
func (r *syncClusters) ServerForName(_ context.Context, name string) (string, error) {
	server, ok := r.names[name]
	if !ok {
		return "", fmt.Errorf("cluster %q is not registered with deputy (registered: %s)", name, r.known)
	}
	return server, nil
}

// RESTConfig implements syncer.Clusters.
func (r *syncClusters) RESTConfig(_ context.Context, server string) (*rest.Config, error) {
	c, ok := r.configs[normalizeServer(server)]
	if !ok {
		return nil, fmt.Errorf("cluster %s is not registered with deputy (registered: %s)", server, r.known)
	}
	if c.err != nil {
		return nil, c.err
	}
	return rest.CopyConfig(c.cfg), nil
}

package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/syncer/source"
)

// syncEngine is the sync engine as deputy's Applications use it: it runs
// operations, resolves revisions for automated syncs, computes diffs,
// compares live state with Git and runs the live-state cache of those
// comparisons (syncer.Engine, or unavailableRunner when it cannot be
// built).
type syncEngine interface {
	syncer.Runner
	syncer.RevisionResolver
	syncer.Differ
	syncer.Comparer
	RunLiveState(ctx context.Context)
}

// newSyncRunner builds the sync engine from the configuration's sync
// section (impersonation, clusters, sources and limits, healthTimeout). An
// engine that cannot be built (its cache directory cannot be created, a
// Secret client cannot be made) does not stop deputy from serving its
// webhooks: every operation and diff then fails with the reason, and the
// error is logged at start. Repository credentials in Secrets are read with
// deputy's identity of cluster mode (config.Validate requires cluster mode
// for them).
func newSyncRunner(s config.Sync, mode *runMode, log *slog.Logger) syncEngine {
	needSecrets := false
	for _, r := range s.Repositories {
		needSecrets = needSecrets || r.Secret != nil
	}
	var secrets source.SecretGetter
	if needSecrets {
		err := errors.New("repository credentials in Secrets need cluster mode (cluster.kubeconfig or cluster.inCluster)")
		if mode.isCluster() {
			var cs kubernetes.Interface
			if cs, err = kubernetes.NewForConfig(mode.restConfig); err == nil {
				secrets = source.SecretsFromClient(cs)
			}
		}
		if err != nil {
			log.Error("sync engine not available: cannot read repository Secrets", "error", err.Error())
			return unavailableRunner{reason: "cannot read the repository credential Secrets: " + err.Error()}
		}
	}
	opts := engineOptions(s, secrets, log)
	// Changes of tracked objects reach cluster mode's controller (built
	// after the engine) for a new comparison.
	opts.OnLiveChange = func(namespace, name string) {
		if c := mode.controller.Load(); c != nil {
			c.LiveChanged(namespace, name)
		}
	}
	engine, err := syncer.NewEngine(opts)
	if err != nil {
		log.Error("sync engine not available", "error", err.Error())
		return unavailableRunner{reason: err.Error()}
	}
	return engine
}

// engineOptions maps the configuration's sync section onto the engine's
// options: the cluster registry, impersonation, the source cache
// (SourceOptions) and sync.healthTimeout.
func engineOptions(s config.Sync, secrets source.SecretGetter, log *slog.Logger) syncer.EngineOptions {
	return syncer.EngineOptions{
		Clusters:      syncClusters(s.Clusters, log),
		Impersonation: syncer.ImpersonationSettings{Enabled: s.Impersonation.Enabled, Enforced: s.Impersonation.IsEnforced()},
		Source:        SourceOptions(s, secrets),
		HealthTimeout: s.HealthTimeout.Duration,
		Logger:        logr.FromSlogHandler(log.Handler()),
	}
}

// SourceOptions maps the configuration's sync section onto the options of
// the engine's source cache (repository credentials, cache directory, local
// repositories, kustomize, limits): deputy serve and deputy render read
// sync.* the same way. secrets reads the Secrets that credentials name (nil
// outside cluster mode; source.New then refuses such credentials).
func SourceOptions(s config.Sync, secrets source.SecretGetter) source.Options {
	creds := make([]source.RepoCredential, 0, len(s.Repositories))
	for _, r := range s.Repositories {
		c := source.RepoCredential{URL: r.URL, UsernameFile: r.UsernameFile, PasswordFile: r.PasswordFile}
		if r.Secret != nil {
			c.Secret = &source.SecretRef{Namespace: r.Secret.Namespace, Name: r.Secret.Name}
		}
		creds = append(creds, c)
	}
	return source.Options{
		RepoCredentials:   creds,
		Secrets:           secrets,
		CacheDir:          s.CacheDir,
		LocalRepositories: s.LocalRepositories,
		Kustomize: source.KustomizeOptions{RemoteResources: s.Kustomize.RemoteResources,
			RemoteTimeout: s.Kustomize.RemoteTimeout.Duration},
		Limits: engineLimits(s.Limits),
	}
}

// engineLimits maps config sync.limits onto the engine's source.Limits, field by
// field (TestEngineLimitsMapsEveryField keeps the two in step).
func engineLimits(l config.SyncLimits) source.Limits {
	return source.Limits{
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

// syncClusters is the engine's cluster registry of sync.clusters: each
// entry's kubeconfig (or in-cluster configuration) is loaded once, here; a
// cluster whose configuration does not load is logged, and the syncs to it
// fail with that error instead of stopping deputy.
func syncClusters(clusters []config.SyncCluster, log *slog.Logger) *cluster.Registry {
	entries := make([]cluster.Entry, 0, len(clusters))
	for _, c := range clusters {
		restCfg, err := config.Cluster{Kubeconfig: c.Kubeconfig, Context: c.Context, InCluster: c.InCluster}.RESTConfig()
		if err != nil {
			err = fmt.Errorf("sync.clusters %q: %w", c.Name, err)
			log.Error("cluster of the sync registry unusable; syncs to it will fail", "cluster", c.Name, "server", c.Server, "error", err.Error())
		}
		entries = append(entries, cluster.Entry{Name: c.Name, Server: c.Server, Config: restCfg, Err: err})
	}
	return cluster.NewRegistry(entries...)
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

// ResolveRevisions implements syncer.RevisionResolver: it fails with the
// reason the engine is not available.
func (u unavailableRunner) ResolveRevisions(context.Context, *v1alpha1.Application, *v1alpha1.AppProject) ([]string, error) {
	return nil, errors.New("sync engine not available: " + u.reason)
}

// Compare implements syncer.Comparer: it fails with the reason the engine
// is not available.
func (u unavailableRunner) Compare(context.Context, *v1alpha1.Application, *v1alpha1.AppProject, []string) (*syncer.Comparison, error) {
	return nil, errors.New("sync engine not available: " + u.reason)
}

// RunLiveState has no cache to run.
func (unavailableRunner) RunLiveState(context.Context) {}

// Diff implements syncer.Differ: it fails with apps.ErrDiffUnavailable and
// the reason the engine is not available.
func (u unavailableRunner) Diff(context.Context, syncer.DiffRequest) (*v1alpha1.ApplicationDiff, error) {
	return nil, fmt.Errorf("%w: sync engine not available: %s (see deputy's log at start)", apps.ErrDiffUnavailable, u.reason)
}

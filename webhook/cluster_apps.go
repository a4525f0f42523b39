package webhook

import (
	"context"
	"log/slog"

	"k8s.io/client-go/rest"

	"deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// LeaseNamespace resolves sync.leaderElection.leaseNamespace: the configured
// value, else deputy's own namespace (config.OwnNamespace: POD_NAMESPACE, the
// in-cluster ServiceAccount's namespace, else deputy-system).
func LeaseNamespace(configured string) string {
	if configured != "" {
		return configured
	}
	return config.OwnNamespace()
}

// newController builds cluster mode's Application controller from the
// configuration (sync.* and shutdown.gracePeriod). served tells whether the
// Application CRD is served: the controller lists Applications and
// campaigns for the Lease only while it is.
func newController(cfg *config.DeputyConfiguration, restCfg *rest.Config, runner syncer.Runner, revisions syncer.RevisionResolver,
	state authorizer.ClusterStateFunc, served func() (served, known bool), log *slog.Logger) (*syncer.Controller, error) {
	le := cfg.Sync.LeaderElection
	return syncer.NewController(syncer.ControllerOptions{
		Config:          rest.CopyConfig(restCfg),
		Runner:          runner,
		Revisions:       revisions,
		Projects:        ClusterProjects(state, cfg.Sync.ProjectNamespaces),
		Workers:         cfg.Sync.Parallelism,
		ReconcilePeriod: cfg.Sync.ReconcilePeriod.Duration,
		ShutdownGrace:   cfg.Shutdown.GracePeriod.Duration,
		Namespaces:      cfg.Sync.ApplicationNamespaces,
		LeaderElection: syncer.LeaderElectionOptions{
			Namespace: LeaseNamespace(le.LeaseNamespace), Name: le.LeaseName, Identity: le.Identity,
			LeaseDuration: le.LeaseDuration.Duration, RenewDeadline: le.RenewDeadline.Duration, RetryPeriod: le.RetryPeriod.Duration,
		},
		ApplicationsServed: served,
		Logger:             log,
	})
}

// ClusterProjects resolves an Application's deputy.dev AppProject in the
// cluster state (the AppProjects cluster mode reads for the impersonation
// gate) with policy.ResolveAppProject over projectNamespaces: it returns a
// copy of the project, an error matching policy.ErrProjectNotUsable when the
// Application may use none, and policy.ErrNotLoaded until the cluster has
// been listed.
func ClusterProjects(state authorizer.ClusterStateFunc, projectNamespaces []string) func(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
	return func(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
		st := state()
		if st == nil || !st.Synced {
			return nil, policy.ErrNotLoaded
		}
		p, err := policy.ResolveAppProject(app, projectNamespaces, st.DeputyAppProject)
		if err != nil {
			return nil, err
		}
		return p.DeepCopy(), nil
	}
}

// ClusterApplications is the ApplicationStore of cluster mode: Applications
// from the controller's informer, AppProjects from projects.
func ClusterApplications(c *syncer.Controller, projects func(app *v1alpha1.Application) (*v1alpha1.AppProject, error)) ApplicationStore {
	return clusterApplications{c: c, projects: projects}
}

type clusterApplications struct {
	c        *syncer.Controller
	projects func(app *v1alpha1.Application) (*v1alpha1.AppProject, error)
}

func (a clusterApplications) Application(namespace, name string) (*v1alpha1.Application, error) {
	return a.c.Application(namespace, name)
}

func (a clusterApplications) AppProject(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
	return a.projects(app)
}

// gitPushTargets are what the Git push webhook acts on: every Application
// deputy knows, and how to trigger an automated sync of one.
type gitPushTargets struct {
	list    func() ([]*v1alpha1.Application, error)
	trigger func(ctx context.Context, app *v1alpha1.Application, push PushEvent) error
}

// initiator is the InitiatedBy.Username of a sync a push triggered, e.g.
// "git-webhook:github".
func (p PushEvent) initiator() string { return "git-webhook:" + p.Provider }

// fileGitPushTargets are the push webhook's targets in file mode: the
// Applications of the policy files, synced by this process's operations
// queue (automated ones only, with their automated prune setting).
func fileGitPushTargets(current func() *policy.Snapshot, projectNamespaces []string, ops *syncer.Operations) gitPushTargets {
	return gitPushTargets{
		list: func() ([]*v1alpha1.Application, error) {
			snap := current()
			if snap == nil {
				return nil, policy.ErrNotLoaded
			}
			out := make([]*v1alpha1.Application, 0, len(snap.Applications))
			for _, a := range snap.Applications {
				out = append(out, a.Object)
			}
			return out, nil
		},
		trigger: func(ctx context.Context, app *v1alpha1.Application, push PushEvent) error {
			if app.Spec.SyncPolicy == nil || app.Spec.SyncPolicy.Automated == nil {
				return nil
			}
			snap := current()
			if snap == nil {
				return policy.ErrNotLoaded
			}
			project, err := policy.ResolveAppProject(app, projectNamespaces, snap.DeputyAppProject)
			if err != nil {
				return err
			}
			_, err = ops.Start(ctx, app, project, v1alpha1.SyncOperation{Prune: app.Spec.SyncPolicy.Automated.Prune},
				v1alpha1.InitiatedBy{Username: push.initiator(), Automated: true})
			return err
		},
	}
}

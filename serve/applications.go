package serve

import (
	"context"
	"log/slog"
	"sync"

	"k8s.io/client-go/rest"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
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

// controllerOptions maps the configuration (sync.* and
// shutdown.gracePeriod) onto cluster mode's Application controller. state
// is the cluster's state (AppProjects are resolved in it, in
// sync.projectNamespaces); served tells whether the Application CRD is
// served: the controller lists Applications and campaigns for the Lease only
// while it is; metrics (nil: none) are the Applications' metrics.
func controllerOptions(cfg *config.DeputyConfiguration, restCfg *rest.Config, engine syncEngine,
	state func() *policy.ClusterState, served func() (served, known bool), metrics *apps.Metrics, log *slog.Logger) apps.ControllerOptions {
	le := cfg.Sync.LeaderElection
	return apps.ControllerOptions{
		Config:          rest.CopyConfig(restCfg),
		Runner:          engine,
		Revisions:       engine,
		Comparer:        engine,
		Differ:          engine,
		Projects:        apps.ClusterProjects(state, cfg.Sync.ProjectNamespaces),
		Workers:         cfg.Sync.Parallelism,
		ReconcilePeriod: cfg.Sync.ReconcilePeriod.Duration,
		ShutdownGrace:   cfg.Shutdown.GracePeriod.Duration,
		Namespaces:      cfg.Sync.ApplicationNamespaces,
		LeaderElection: apps.LeaderElectionOptions{
			Namespace: LeaseNamespace(le.LeaseNamespace), Name: le.LeaseName, Identity: le.Identity,
			LeaseDuration: le.LeaseDuration.Duration, RenewDeadline: le.RenewDeadline.Duration, RetryPeriod: le.RetryPeriod.Duration,
		},
		ApplicationsServed: served,
		Metrics:            metrics,
		Logger:             log,
	}
}

// fileOptions maps the configuration (sync.projectNamespaces,
// sync.parallelism) onto file mode's Applications over the policy
// snapshot; metrics (nil: none) are the Applications' metrics.
func fileOptions(cfg *config.DeputyConfiguration, snapshot func() *policy.Snapshot, engine syncEngine, metrics *apps.Metrics, log *slog.Logger) apps.FileOptions {
	return apps.FileOptions{
		Snapshot:          snapshot,
		ProjectNamespaces: cfg.Sync.ProjectNamespaces,
		Runner:            engine,
		Differ:            engine,
		Workers:           cfg.Sync.Parallelism,
		Metrics:           metrics,
		Logger:            log,
	}
}

// startApplications builds deputy's Applications for the run mode and
// starts them: in cluster mode the Application controller, which runs until
// ctx ends, while the Application CRD is served (it is stored in the mode
// before it starts, for the cluster source's OnServedChange), a sync
// requested here being recorded on the Application for the leader to run; in
// file mode the Applications of the policy snapshot, synced by this process.
// stop (the server's BeforeStop) drains the syncs, and in cluster mode
// releases the sync Lease once ctx has ended, while deputy still answers its
// webhooks: kube-apiserver may ask deputy to authorize those very requests
// (impersonated writes, the Lease update). stop may be called more than
// once. metrics (nil: none) count the operations and report the
// Applications on /metrics.
//
// Errors: the controller cannot be built (apps.NewController).
func startApplications(ctx context.Context, cfg *config.DeputyConfiguration, mode *runMode, snapshot func() *policy.Snapshot,
	engine syncEngine, metrics *apps.Metrics, log *slog.Logger) (applications apps.Applications, stop func(), err error) {
	if mode.isCluster() {
		controller, err := apps.NewController(controllerOptions(cfg, mode.restConfig, engine, mode.cluster.Current, mode.applicationsServed, metrics, log))
		if err != nil {
			return nil, nil, err
		}
		mode.controller.Store(controller)
		done := make(chan struct{})
		go engine.RunLiveState(ctx)
		go func() {
			defer close(done)
			if err := controller.Run(ctx); err != nil {
				log.Error("the Application controller stopped; this replica runs no operations", "error", err.Error())
			}
		}()
		// The controller drains and releases the Lease when ctx ends.
		return controller, func() { <-done }, nil
	}
	file := apps.NewFile(fileOptions(cfg, snapshot, engine, metrics, log))
	var drained sync.Once
	return file, func() {
		drained.Do(func() {
			drainCtx, cancel := context.WithTimeout(context.Background(), cfg.Shutdown.GracePeriod.Duration)
			defer cancel()
			if err := file.Shutdown(drainCtx); err != nil {
				log.Error("sync operations did not finish before shutdown", "error", err.Error())
			}
		})
	}, nil
}

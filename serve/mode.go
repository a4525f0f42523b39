package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/clustersource"
	"deputy.dev/deputy/tokenreview"
	"deputy.dev/deputy/webhook"
)

// runMode is deputy's run mode, decided once by startRunMode: file mode
// (the zero value) reads everything from the policy files; cluster mode
// reads the cluster's RBAC objects and AppProjects through informers, next
// to the policy files, and deputy's Applications from the cluster. Every
// component that differs by mode takes its options from here.
type runMode struct {
	// restConfig is deputy's own identity on the cluster; nil in file mode.
	restConfig *rest.Config
	// cluster reads the cluster; nil in file mode.
	cluster *clustersource.Source
	// controller is cluster mode's Application controller once built: it
	// runs while the Application CRD is served, which the cluster source
	// tracks and tells it.
	controller atomic.Pointer[apps.Controller]
}

// isCluster reports whether deputy runs in cluster mode.
func (m *runMode) isCluster() bool { return m.restConfig != nil }

// clusterState is the cluster's state for the impersonation gate; nil in
// file mode.
func (m *runMode) clusterState() authorizer.ClusterStateFunc {
	if !m.isCluster() {
		return nil
	}
	return m.cluster.Current
}

// refreshResources asks discovery again (the gate calls it for a resource it
// does not know); nil in file mode.
func (m *runMode) refreshResources() func() {
	if !m.isCluster() {
		return nil
	}
	return m.cluster.RefreshResources
}

// projectRoles is where project tokens' roles are looked up: the AppProjects
// of the cluster in cluster mode (where deputy's API finds them too), else
// those of the policy snapshot.
func (m *runMode) projectRoles(snapshot func() *policy.Snapshot) tokenreview.ProjectRoleLookup {
	if m.isCluster() {
		return tokenreview.ClusterProjectRoles(m.cluster.Current)
	}
	return tokenreview.SnapshotProjectRoles(snapshot)
}

// applicationsServed tells whether the Application CRD is served (cluster
// mode only).
func (m *runMode) applicationsServed() (served, known bool) {
	return m.cluster.Served(apps.ApplicationsResource)
}

// readiness are /readyz's checks: the policy source, and in cluster mode
// the cluster's state.
func (m *runMode) readiness(source *policy.FileSource) []webhook.ReadinessCheck {
	checks := []webhook.ReadinessCheck{{Name: "policy", Check: policyReady(source)}}
	if m.isCluster() {
		checks = append(checks, webhook.ReadinessCheck{Name: "cluster", Check: clusterReady(m.cluster)})
	}
	return checks
}

// startRunMode decides the run mode from the cluster section, once: cluster
// mode with cluster.kubeconfig or cluster.inCluster, file mode otherwise. In
// cluster mode it starts the cluster source (RBAC objects, AppProjects, and
// whether the Application CRD is served), which calls onChange after every
// change of the cluster's state, until ctx ends; stop waits for it to end
// once ctx has ended. In file mode stop does nothing.
//
// Errors: cluster mode's client configuration cannot be loaded (naming the
// setting), or the cluster source cannot be built.
func startRunMode(ctx context.Context, c config.Cluster, log *slog.Logger, onChange func()) (mode *runMode, stop func(), err error) {
	mode = &runMode{}
	if c.Kubeconfig == "" && !c.InCluster {
		return mode, func() {}, nil
	}
	restCfg, err := c.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	cluster, err := clustersource.New(restCfg, clustersource.Options{Logger: log,
		OnChange:  func(*policy.ClusterState) { onChange() },
		Resources: []schema.GroupVersionResource{apps.ApplicationsResource},
		OnServedChange: func() {
			if ctrl := mode.controller.Load(); ctrl != nil {
				ctrl.ApplicationsServedChanged()
			}
		}})
	if err != nil {
		return nil, nil, err
	}
	log.Info("cluster mode: reading RBAC objects and AppProjects from the cluster", "server", restCfg.Host)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cluster.Run(ctx) // fails only when run twice
	}()
	mode.restConfig, mode.cluster = restCfg, cluster
	return mode, func() { <-done }, nil
}

// clusterReady is the readiness check of cluster mode: red until the
// cluster's RBAC objects and AppProjects have been listed (the gate denies
// impersonation until then) and while a list, watch or discovery call fails.
func clusterReady(s *clustersource.Source) func() error {
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

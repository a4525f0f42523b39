//go:build envtest

// This test runs ClusterSource against a real kube-apiserver and etcd
// (envtest); it is behind the envtest build tag so that the package's unit
// tests do not compile envtest:
//
//	KUBEBUILDER_ASSETS=$PWD/bin go test -tags envtest -run ClusterSourceAPIServer ./policy/clustersource/

package clustersource_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"deputy.dev/deputy/policy/clustersource"
)

func TestClusterSourceAPIServer(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd (make test-binaries puts them in bin/)")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		// Only Argo CD's CRD at start: deputy.dev's is installed later.
		CRDDirectoryPaths:        []string{filepath.Join(root, "manifests", "testing")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)

	logs := &syncBuffer{}
	src, err := clustersource.New(cfg, clustersource.Options{
		Logger:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		DiscoveryInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &clusterFixture{src: src, logs: logs}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CLUSTER_LOGS") != "" {
			t.Logf("source logs:\n%s", logs.String())
		}
	})
	f.run(t)

	t.Run("syncs with the deputy.dev CRD absent", func(t *testing.T) {
		s := f.waitSynced(t)
		st := src.Status()
		if !slices.Equal(st.AbsentGroups, []string{"deputy.dev"}) || !st.Ready() || st.ClusterRoles == 0 {
			t.Errorf("status = %+v, want deputy.dev absent, ready, the apiserver's ClusterRoles indexed", st)
		}
		if len(s.Projects) != 0 {
			t.Errorf("projects = %v", projectKeys(s))
		}
	})

	t.Run("an argoproj.io AppProject and a ClusterRoleBinding become visible", func(t *testing.T) {
		u := clusterProject("argoproj.io", "default", "guestbook", saSpec("guestbook", "deployer"))
		if _, err := dyn.Resource(argoGVR).Namespace("default").Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		took := clusterWaitFor(t, "the project", func() bool {
			return projectSA(src.Current(), "argoproj.io", "default", "guestbook") == "deployer"
		})
		t.Logf("AppProject visible %s after Create returned", took)
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, crb("alice-view", "view", userSubject("alice")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		took = clusterWaitFor(t, "the binding", func() bool {
			return slices.Equal(bindingsFor(src.Current(), "alice", nil, ""), []string{"alice-view"})
		})
		t.Logf("ClusterRoleBinding visible %s after Create returned", took)
	})

	t.Run("installing the deputy.dev CRD later starts its informer", func(t *testing.T) {
		crds, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "manifests", "crds")}, ErrorIfPathMissing: true})
		if err != nil {
			t.Fatal(err)
		}
		clusterWaitFor(t, "the group to be discovered", func() bool { return len(src.Status().AbsentGroups) == 0 })
		u := clusterProject("deputy.dev", "default", "platform", saSpec("platform", "sync"))
		if _, err := dyn.Resource(deputyGVR).Namespace("default").Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		clusterWaitFor(t, "the deputy.dev project", func() bool {
			return projectSA(src.Current(), "deputy.dev", "default", "platform") == "sync"
		})

		// Deleting the CRD drops the group's projects and readiness recovers.
		if err := envtest.UninstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
			t.Fatal(err)
		}
		clusterWaitFor(t, "the group to be absent again", func() bool {
			st := src.Status()
			return slices.Equal(st.AbsentGroups, []string{"deputy.dev"}) && st.Ready() &&
				projectSA(src.Current(), "deputy.dev", "default", "platform") == ""
		})
		if projectSA(src.Current(), "argoproj.io", "default", "guestbook") != "deployer" {
			t.Error("the argoproj.io project must stay")
		}
	})
}

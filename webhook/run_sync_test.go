package webhook

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

func TestSyncClustersResolveNamesAndServers(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(clusterTestKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newSyncClusters([]config.SyncCluster{
		{Name: "prod", Server: "https://prod.example:6443/", Kubeconfig: kc, Context: "ctx-b"},
		{Name: "broken", Server: "https://broken.example", Kubeconfig: filepath.Join(t.TempDir(), "missing")},
	}, discardLog())
	ctx := t.Context()

	server, err := r.ServerForName(ctx, "prod")
	if err != nil || server != "https://prod.example:6443" {
		t.Errorf("ServerForName(prod) = %q, %v", server, err)
	}
	cfg, err := r.RESTConfig(ctx, "https://prod.example:6443")
	if err != nil || cfg.Host != "https://b.example:6443" {
		t.Errorf("RESTConfig(prod) = %v, %v; want the kubeconfig context's host", cfg, err)
	}
	cfg.Host = "changed"
	if again, _ := r.RESTConfig(ctx, "https://prod.example:6443/"); again.Host != "https://b.example:6443" {
		t.Error("RESTConfig hands out its own configuration instead of a copy")
	}
	if _, err := r.ServerForName(ctx, "staging"); err == nil || !strings.Contains(err.Error(), `cluster "staging" is not registered with deputy (registered: prod (https://prod.example:6443), broken (https://broken.example))`) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := r.RESTConfig(ctx, "https://other"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("unknown server: %v", err)
	}
	if _, err := r.RESTConfig(ctx, "https://broken.example"); err == nil || !strings.Contains(err.Error(), `sync.clusters "broken"`) {
		t.Errorf("a cluster whose kubeconfig failed: %v", err)
	}
	var _ syncer.Clusters = r
	if _, err := newSyncClusters(nil, discardLog()).ServerForName(ctx, "in-cluster"); err == nil || !strings.Contains(err.Error(), "add the cluster to sync.clusters") {
		t.Errorf("empty registry: %v", err)
	}
}

func TestUnavailableRunnerFailsEveryOperationWithTheReason(t *testing.T) {
	app := &v1alpha1.Application{}
	st := unavailableRunner{reason: "cannot create .deputy/repos"}.Run(t.Context(), syncer.Request{Application: app, Sync: v1alpha1.SyncOperation{DryRun: true}}, nil)
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "sync engine not available: cannot create .deputy/repos") ||
		st.FinishedAt == nil || st.Operation.Sync == nil || !st.Operation.Sync.DryRun {
		t.Errorf("state %+v", st)
	}
}

// TestRunServesTheSyncAPI is the composition root's wiring: deputy serve
// answers a sync of a policy-file Application with 202, the caller
// authenticated by a static token and authorized by the policy's RBAC.
func TestRunServesTheSyncAPI(t *testing.T) {
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policy")
	if err := os.MkdirAll(policyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A local repository URL that does not exist: the engine fails fast,
	// without the network.
	apps := strings.ReplaceAll(string(apiTestPolicy[0].Data), "https://example.test/guestbook.git", "file://"+filepath.ToSlash(filepath.Join(dir, "no-such-repo")))
	for name, data := range map[string]string{"apps.yaml": apps, "rbac.yaml": string(apiTestPolicy[1].Data), "tokens.csv": string(apiTestPolicy[2].Data)} {
		if err := os.WriteFile(filepath.Join(policyDir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.TLS.CertDir = filepath.Join(dir, "certs")
	cfg.Policy.Paths = []string{policyDir}
	cfg.Sync.CacheDir = filepath.Join(dir, "repos")
	cfg.Sync.ProjectNamespaces = []string{"guestbook"} // the test policy's AppProject lives next to its Application
	if errs := config.Validate(cfg); len(errs) > 0 {
		t.Fatal(errs)
	}
	ctx, cancel := context.WithCancel(t.Context())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, discardLog(), func(s Serving) { addrc <- s.Addr }) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not stop")
		}
	}()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not start")
	}
	client, err := NewAPIClient(APIClientOptions{Server: "https://" + addr.String(), CAFile: filepath.Join(cfg.TLS.CertDir, certs.CACertFile), Token: aliceAPIToken})
	if err != nil {
		t.Fatal(err)
	}
	st, err := client.Sync(ctx, "guestbook", "guestbook", v1alpha1.SyncOperation{DryRun: true})
	if err != nil {
		t.Fatalf("sync through deputy serve: %v", err)
	}
	if st.Phase != v1alpha1.OperationRunning || st.Operation.InitiatedBy.Username != "alice" {
		t.Errorf("state %+v", st)
	}
	// The engine runs it (and fails: the repository does not exist); the
	// watch ends with a final phase.
	final, err := client.Watch(ctx, "guestbook", "guestbook", nil)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	t.Logf("final state: %s: %s", final.Phase, final.Message)
	if final.Phase == v1alpha1.OperationRunning || final.Phase == v1alpha1.OperationSucceeded {
		t.Errorf("final state %+v, want a failure (nothing to sync to)", final)
	}
	bob, _ := NewAPIClient(APIClientOptions{Server: "https://" + addr.String(), CAFile: filepath.Join(cfg.TLS.CertDir, certs.CACertFile), Token: bobAPIToken})
	if _, err := bob.Sync(ctx, "guestbook", "guestbook", v1alpha1.SyncOperation{}); err == nil || !strings.Contains(err.Error(), `User "bob" cannot create resource "applications/sync"`) {
		t.Errorf("bob's sync: %v", err)
	}
}

//go:build envtest

package serve

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"deputy.dev/deputy/config"
)

// syncLog collects Run's log lines.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncLog) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Issue 12 item 4, in `deputy serve` as a whole: cluster mode on a cluster
// without deputy's CRDs (the gate only, as with examples/config/argocd.yaml)
// does not campaign for the sync Lease and logs no error, although the
// Lease's namespace does not exist; installing the CRDs (and the namespace)
// starts the Application controller, and SIGTERM releases the Lease and says
// so.
func TestRunClusterModeCampaignsOnlyWithTheApplicationCRDAPIServer(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd (make test-binaries puts them in bin/)")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: 2 * time.Minute}
	restCfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	u, err := env.AddUser(envtest.User{Name: "deputy", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(restCfg)

	const leaseNS = "deputy-lease"
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.TLS.CertDir = t.TempDir()
	cfg.Cluster.Kubeconfig = kubeconfig
	config.SetDefaults(cfg)
	cfg.Sync.LeaderElection.LeaseNamespace = leaseNS
	cfg.Sync.LeaderElection.LeaseDuration.Duration = 3 * time.Second
	cfg.Sync.LeaderElection.RenewDeadline.Duration = 2 * time.Second
	cfg.Sync.LeaderElection.RetryPeriod.Duration = 500 * time.Millisecond
	cfg.Sync.CacheDir = t.TempDir()
	if errs := config.Validate(cfg); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}

	logs := &syncLog{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, log, func(s Serving) { addrs <- s.Addr }) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
		if t.Failed() || os.Getenv("DEPUTY_TEST_LOGS") != "" {
			t.Logf("deputy's log:\n%s", logs.String())
		}
	})
	select {
	case <-addrs:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("Run did not listen")
	}

	waitLog := func(what string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(logs.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("the log never said %q", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitLog("cluster policy synced")
	waitLog("not campaigning for the sync Lease")
	time.Sleep(3 * time.Second) // several retry periods of a campaign
	if l := logs.String(); strings.Contains(l, "level=ERROR") || strings.Contains(l, `msg="campaigning for the sync Lease"`) {
		t.Errorf("without the Application CRD deputy campaigned or logged errors:\n%s", l)
	}

	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(restCfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "manifests", "crds")}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	waitLog("leading syncs")
	if _, err := kube.CoordinationV1().Leases(leaseNS).Get(t.Context(), cfg.Sync.LeaderElection.LeaseName, metav1.GetOptions{}); err != nil {
		t.Fatalf("the sync Lease: %v", err)
	}

	cancel() // SIGTERM
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
	}
	l, err := kube.CoordinationV1().Leases(leaseNS).Get(context.Background(), cfg.Sync.LeaderElection.LeaseName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		t.Errorf("the Lease is still held by %q after the stop", *l.Spec.HolderIdentity)
	}
	if !strings.Contains(logs.String(), "released the sync Lease") {
		t.Errorf("the log does not say the Lease was released:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", logs.String())
	}
}

package webhook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
)

const clusterTestKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443"}
users:
- name: u
  user: {token: not-a-secret}
contexts:
- name: ctx-a
  context: {cluster: a, user: u}
- name: ctx-b
  context: {cluster: b, user: u}
current-context: ctx-a
`

func TestClusterRESTConfig(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(clusterTestKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cluster  config.Cluster
		wantHost string
		wantErr  string
	}{
		{"the kubeconfig's current context is the default", config.Cluster{Kubeconfig: kc}, "https://a.example:6443", ""},
		{"--context picks another context", config.Cluster{Kubeconfig: kc, Context: "ctx-b"}, "https://b.example:6443", ""},
		{"an unknown context is an error", config.Cluster{Kubeconfig: kc, Context: "nope"}, "", "--kubeconfig"},
		{"a missing kubeconfig is an error naming the flag", config.Cluster{Kubeconfig: filepath.Join(t.TempDir(), "missing")}, "", "--kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ClusterRESTConfig(tc.cluster)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.wantHost {
				t.Errorf("host = %q, want %q", cfg.Host, tc.wantHost)
			}
		})
	}
	t.Run("in-cluster outside a Pod is an error naming the flag", func(t *testing.T) {
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		t.Setenv("KUBERNETES_SERVICE_PORT", "")
		if _, err := ClusterRESTConfig(config.Cluster{InCluster: true}); err == nil || !strings.Contains(err.Error(), "--in-cluster") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestClusterReadiness(t *testing.T) {
	src, err := policy.NewClusterSourceForClients(policy.ClusterClients{
		Kube:    kubefake.NewClientset(),
		Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
	}, policy.ClusterSourceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check := clusterReady(src)
	if err := check(); err == nil || !strings.Contains(err.Error(), "not synced yet") {
		t.Errorf("before sync: %v, want not synced", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// The fake discovery knows no AppProject CRD: both groups count as
	// absent, which does not hold up readiness.
	deadline := time.Now().Add(30 * time.Second)
	for check() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", check())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

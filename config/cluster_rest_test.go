package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		cluster  Cluster
		wantHost string
		wantErr  string
	}{
		{"the kubeconfig's current context is the default", Cluster{Kubeconfig: kc}, "https://a.example:6443", ""},
		{"--context picks another context", Cluster{Kubeconfig: kc, Context: "ctx-b"}, "https://b.example:6443", ""},
		{"an unknown context is an error", Cluster{Kubeconfig: kc, Context: "nope"}, "", "--kubeconfig"},
		{"a missing kubeconfig is an error naming the flag", Cluster{Kubeconfig: filepath.Join(t.TempDir(), "missing")}, "", "--kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.cluster.RESTConfig()
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
		if _, err := (Cluster{InCluster: true}).RESTConfig(); err == nil || !strings.Contains(err.Error(), "--in-cluster") {
			t.Errorf("err = %v", err)
		}
	})
}

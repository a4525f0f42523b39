package cluster

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestClusterRegistry(t *testing.T) {
	ctx := t.Context()
	r := NewRegistry(
		Entry{Name: "prod", Server: "https://prod.example:6443/", Config: &rest.Config{Host: "https://b.example:6443"}},
		Entry{Name: "broken", Server: "https://broken.example", Err: errors.New("kubeconfig did not load")},
		Entry{Name: "empty", Server: "https://empty.example"},
	)
	if server, err := r.ServerForName(ctx, "prod"); err != nil || server != "https://prod.example:6443" {
		t.Errorf("ServerForName(prod) = %q, %v; want the server without its trailing slash", server, err)
	}
	cfg, err := r.RESTConfig(ctx, "https://prod.example:6443")
	if err != nil || cfg.Host != "https://b.example:6443" {
		t.Fatalf("RESTConfig(prod) = %v, %v", cfg, err)
	}
	cfg.Host = "changed"
	if again, _ := r.RESTConfig(ctx, "https://prod.example:6443/"); again.Host != "https://b.example:6443" {
		t.Error("RESTConfig hands out its own configuration instead of a copy")
	}
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"an unknown name lists the registered clusters", func() error { _, err := r.ServerForName(ctx, "staging"); return err },
			`cluster "staging" is not registered with deputy (registered: prod (https://prod.example:6443), broken (https://broken.example), empty (https://empty.example))`},
		{"an unknown server is not registered", func() error { _, err := r.RESTConfig(ctx, "https://other"); return err }, "not registered"},
		{"a cluster whose configuration did not load fails with that error", func() error { _, err := r.RESTConfig(ctx, "https://broken.example"); return err },
			"kubeconfig did not load"},
		{"a cluster without a configuration says so", func() error { _, err := r.RESTConfig(ctx, "https://empty.example"); return err },
			"has no client configuration"},
		{"an empty registry says how to add a cluster", func() error { _, err := NewRegistry().ServerForName(ctx, InClusterName); return err },
			"add the cluster to sync.clusters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

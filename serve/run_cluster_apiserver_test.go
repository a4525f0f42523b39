//go:build envtest

// Cluster mode of `deputy serve` against a real kube-apiserver and etcd
// (envtest); behind the envtest build tag so that the package's unit tests do
// not compile envtest:
//
//	KUBEBUILDER_ASSETS=$PWD/bin go test -tags envtest -run RunClusterModeAPIServer ./serve/

package serve

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"deputy.dev/deputy/config"
)

func TestRunClusterModeAPIServer(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd (make test-binaries puts them in bin/)")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: 2 * time.Minute}
	if _, err := env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	kubeconfig := func(t *testing.T, name string, groups ...string) string {
		t.Helper()
		u, err := env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := u.KubeConfig()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(p, kc, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	for _, tc := range []struct {
		name   string
		user   string
		groups []string
		want   string
	}{
		{"an identity that may read the cluster turns readiness green", "reader", []string{"system:masters"}, "[+]cluster ok"},
		{"an identity that may not list RBAC objects keeps readiness red with the cause", "nobody", nil, "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Listen = "127.0.0.1:0"
			cfg.TLS.CertDir = t.TempDir()
			cfg.Cluster.Kubeconfig = kubeconfig(t, tc.user, tc.groups...)
			ctx, cancel := context.WithCancel(t.Context())
			addrs := make(chan net.Addr, 1)
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg, discardLog(), func(s Serving) { addrs <- s.Addr }) }()
			t.Cleanup(func() {
				cancel()
				<-done
			})
			var addr net.Addr
			select {
			case addr = <-addrs:
			case err := <-done:
				t.Fatalf("Run: %v", err)
			}
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // dev certificates
			var body string
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(body, tc.want) {
				if time.Now().After(deadline) {
					t.Fatalf("/readyz never contained %q; last:\n%s", tc.want, body)
				}
				time.Sleep(50 * time.Millisecond)
				resp, err := client.Get("https://" + addr.String() + "/readyz?verbose")
				if err != nil {
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
			}
			t.Logf("/readyz?verbose:\n%s", body)
		})
	}
}

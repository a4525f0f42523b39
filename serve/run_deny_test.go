package serve

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
)

// runDeny starts deputy serve with authorization.defaultDecision Deny over
// policyPaths (nil: the embedded example) and returns its address, its
// certificate directory and its log.
func runDeny(t *testing.T, policyPaths []string) (string, string, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.TLS.CertDir = filepath.Join(dir, "certs")
	cfg.Policy.Paths = policyPaths
	cfg.Sync.CacheDir = filepath.Join(dir, "repos")
	cfg.Authorization.DefaultDecision = "Deny"
	if errs := config.Validate(cfg); len(errs) > 0 {
		t.Fatal(errs)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)), func(s Serving) { addrc <- s.Addr })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not stop")
		}
	})
	select {
	case addr := <-addrc:
		return addr.String(), cfg.TLS.CertDir, logs
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not start")
	}
	return "", "", nil
}

// With defaultDecision Deny, deputy serve warns about missing bootstrap
// grants, and a SubjectAccessReview's denial names the closest binding.
func TestRunWithDefaultDeny(t *testing.T) {
	t.Run("a policy without the bootstrap grants is served with a warning per grant", func(t *testing.T) {
		policyDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(policyDir, "rbac.yaml"), testPolicy[1].Data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, logs := runDeny(t, []string{policyDir})
		for _, want := range []string{"clusterRole=system:discovery", "clusterRole=system:basic-user", "clusterRole=system:public-info-viewer",
			`"authorization.defaultDecision is Deny and the policy lacks a bootstrap grant ordinary clients need; add it from examples/bootstrap.yaml"`} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, logs)
			}
		}
	})
	t.Run("the embedded example ships them; a denial explains itself", func(t *testing.T) {
		addr, certDir, logs := runDeny(t, nil)
		if strings.Contains(logs.String(), "bootstrap grant") {
			t.Errorf("unexpected warning:\n%s", logs)
		}
		pool := x509.NewCertPool()
		ca, err := os.ReadFile(filepath.Join(certDir, certs.CACertFile))
		if err != nil || !pool.AppendCertsFromPEM(ca) {
			t.Fatalf("CA: %v", err)
		}
		cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, certs.ClientCertFile), filepath.Join(certDir, certs.ClientKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
		review := func(sar authorizationv1.SubjectAccessReview) authorizationv1.SubjectAccessReviewStatus {
			t.Helper()
			sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
			body, _ := json.Marshal(sar)
			resp, err := client.Post("https://"+addr+"/authorize", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			return out.Status
		}
		st := review(authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice", Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Resource: "pods", Namespace: "team-a", Name: "web"}}})
		want := `deputy: no policy rule allows this request; closest: RoleBinding "alice-pod-reader/team-a" of ClusterRole "pod-reader" to User "alice" has {APIGroups:[""], Resources:["pods" "pods/log"], Verbs:["get" "list" "watch"]}, which lacks verb "delete"`
		if st.Allowed || !st.Denied || st.Reason != want {
			t.Errorf("status %+v\nwant denied with reason %q", st, want)
		}
		// kubectl get pods works: discovery is allowed by the bootstrap grants.
		if st := review(authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice", Groups: []string{"system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/apis"}}}); !st.Allowed {
			t.Errorf("discovery: %+v", st)
		}
	})
}

package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy/v1alpha1"
)

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
	apps := strings.ReplaceAll(string(testPolicy[0].Data), "https://example.test/guestbook.git", "file://"+filepath.ToSlash(filepath.Join(dir, "no-such-repo")))
	for name, data := range map[string]string{"apps.yaml": apps, "rbac.yaml": string(testPolicy[1].Data), "tokens.csv": string(testPolicy[2].Data)} {
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
	client, err := apiclient.New(apiclient.Options{Server: "https://" + addr.String(), CAFile: filepath.Join(cfg.TLS.CertDir, certs.CACertFile), Token: aliceAPIToken})
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
	// /metrics reports the Application and counts its attempt.
	metrics := scrape(t, "https://"+addr.String()+"/metrics", filepath.Join(cfg.TLS.CertDir, certs.CACertFile))
	for _, want := range []string{
		`deputy_app_info{health_status="Unknown",name="guestbook",namespace="guestbook",project="guestbook",sync_status="Unknown"} 1`,
		`deputy_app_sync_total{name="guestbook",namespace="guestbook",phase="` + final.Phase + `",project="guestbook"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	bob, _ := apiclient.New(apiclient.Options{Server: "https://" + addr.String(), CAFile: filepath.Join(cfg.TLS.CertDir, certs.CACertFile), Token: bobAPIToken})
	if _, err := bob.Sync(ctx, "guestbook", "guestbook", v1alpha1.SyncOperation{}); err == nil || !strings.Contains(err.Error(), `User "bob" cannot create resource "applications/sync"`) {
		t.Errorf("bob's sync: %v", err)
	}
}

// scrape GETs url over TLS verified with caFile and returns the body.
func scrape(t *testing.T, url, caFile string) string {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}

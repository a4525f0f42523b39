package webhook

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deputy.dev/deputy/certs"
)

// On SIGTERM the server keeps answering reviews until BeforeStop (the sync
// drain and the Lease release, whose requests kube-apiserver may ask deputy
// to authorize) has returned, even with no shutdown delay; only then does it
// stop accepting connections.
func TestServerAnswersReviewsUntilBeforeStopReturns(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Init(dir, certs.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	authorize := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "answered") })
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}} //nolint:gosec // test server
	var addr string
	type review struct {
		code int
		body string
		err  error
	}
	reviewed := make(chan review, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	addr, done := startServer(t, ctx, ServerOptions{
		CertFile: filepath.Join(dir, certs.ServingCertFile), KeyFile: filepath.Join(dir, certs.ServingKeyFile), MinTLSVersion: tls.VersionTLS12,
		Authorize: authorize,
		BeforeStop: func() {
			close(entered)
			// What the Lease release does: a request kube-apiserver
			// authorizes through deputy, on a new connection.
			resp, err := client.Post("https://"+addr+"/authorize", "application/json", strings.NewReader("{}"))
			if err != nil {
				reviewed <- review{err: err}
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				reviewed <- review{code: resp.StatusCode, body: string(b)}
			}
			<-release
		},
	})
	cancel() // SIGTERM

	<-entered
	if r := <-reviewed; r.err != nil || r.code != http.StatusOK || r.body != "answered" {
		t.Errorf("a review during BeforeStop: %+v, want 200 answered", r)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned before BeforeStop did: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after BeforeStop")
	}
	if _, err := client.Get("https://" + addr + "/livez"); err == nil {
		t.Error("the server still accepts connections after Run returned")
	}
}

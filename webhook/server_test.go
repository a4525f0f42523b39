package webhook

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deputy.dev/deputy/certs"
)

// startServer runs a Server on 127.0.0.1:0 and returns its address and a
// channel with Run's result.
func startServer(t *testing.T, ctx context.Context, opts ServerOptions) (string, <-chan error) {
	t.Helper()
	addrc := make(chan net.Addr, 1)
	opts.Listen = "127.0.0.1:0"
	opts.OnListen = func(a net.Addr) { addrc <- a }
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.Log == nil {
		opts.Log = discardLog()
	}
	if opts.GracePeriod == 0 {
		opts.GracePeriod = 10 * time.Second
	}
	done := make(chan error, 1)
	go func() { done <- NewServer(opts).Run(ctx) }()
	select {
	case a := <-addrc:
		return a.String(), done
	case err := <-done:
		t.Fatalf("server did not start: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("server did not start")
	}
	return "", nil
}

// servedSerial dials addr on a new connection and returns the serving
// certificate's serial number.
func servedSerial(t *testing.T, addr string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only reads the certificate
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// A rotated serving certificate is served to new connections without a
// restart (the public bug class: certificates loaded once and served expired).
func TestServerServesARotatedCertificate(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Init(dir, certs.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addr, done := startServer(t, ctx, ServerOptions{
		CertFile: filepath.Join(dir, certs.ServingCertFile), KeyFile: filepath.Join(dir, certs.ServingKeyFile), MinTLSVersion: tls.VersionTLS12,
	})
	before := servedSerial(t, addr)
	if _, err := certs.Init(dir, certs.InitOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for servedSerial(t, addr) == before {
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was not served within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestServerRefusesTLSBelow12(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Init(dir, certs.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	addr, _ := startServer(t, t.Context(), ServerOptions{
		CertFile: filepath.Join(dir, certs.ServingCertFile), KeyFile: filepath.Join(dir, certs.ServingKeyFile), MinTLSVersion: tls.VersionTLS12,
	})
	_, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}) //nolint:gosec // testing the refusal
	if err == nil {
		t.Fatal("a TLS 1.1 handshake succeeded")
	}
}

// SIGTERM (the end of Run's context) turns /readyz red, keeps serving for the
// shutdown delay, and lets an in-flight review finish before Run returns.
func TestServerDrainsInFlightRequestsOnShutdown(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Init(dir, certs.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "finished")
	})
	ctx, cancel := context.WithCancel(t.Context())
	addr, done := startServer(t, ctx, ServerOptions{
		CertFile: filepath.Join(dir, certs.ServingCertFile), KeyFile: filepath.Join(dir, certs.ServingKeyFile), MinTLSVersion: tls.VersionTLS12,
		Authorize: slow, ShutdownDelay: 2 * time.Second,
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test server

	type result struct {
		code int
		body string
		err  error
	}
	inflight := make(chan result, 1)
	go func() {
		resp, err := client.Post("https://"+addr+"/authorize", "application/json", strings.NewReader("{}"))
		if err != nil {
			inflight <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		inflight <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-entered
	cancel() // what SIGTERM does in deputy serve

	// During the shutdown delay deputy still serves, with /readyz red.
	var ready *http.Response
	var err error
	for i := 0; i < 50; i++ {
		if ready, err = client.Get("https://" + addr + "/readyz"); err == nil && ready.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if ready != nil {
			ready.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || ready.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz during shutdown: %v %v, want 503", err, ready)
	}
	b, _ := io.ReadAll(ready.Body)
	ready.Body.Close()
	if !strings.Contains(string(b), "[-]shutdown failed: deputy is shutting down") {
		t.Errorf("/readyz body:\n%s", b)
	}

	close(release)
	if r := <-inflight; r.err != nil || r.code != http.StatusOK || r.body != "finished" {
		t.Errorf("in-flight request: %+v, want 200 finished", r)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after draining")
	}
}

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

// Once shutdown has begun, HTTP/1.1 keep-alive clients are told to close
// their connection after each answer, so that they reconnect through the
// Service to a ready replica during the shutdown delay rather than lose a
// request on a connection the drain closes (test/load/rolling.sh measured
// failed reviews without it).
func TestServerClosesHTTP1ConnectionsWhileShuttingDown(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Init(dir, certs.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") })
	ctx, cancel := context.WithCancel(t.Context())
	addr, done := startServer(t, ctx, ServerOptions{
		CertFile: filepath.Join(dir, certs.ServingCertFile), KeyFile: filepath.Join(dir, certs.ServingKeyFile), MinTLSVersion: tls.VersionTLS12,
		Authorize: ok, ShutdownDelay: 2 * time.Second,
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test server
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}} // HTTP/1.1
	post := func() *http.Response {
		t.Helper()
		resp, err := client.Post("https://"+addr+"/authorize", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := post(); resp.Close || resp.ProtoMajor != 1 {
		t.Fatalf("before shutdown: HTTP/%d, Connection: close %t; want a kept-alive HTTP/1.1 connection", resp.ProtoMajor, resp.Close)
	}
	cancel()
	deadline := time.Now().Add(time.Second)
	for {
		if resp := post(); resp.Close {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("answers during the shutdown delay keep the connection alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

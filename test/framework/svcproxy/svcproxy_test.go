package svcproxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// replica is an HTTPS server that names itself and whose /readyz follows ready.
type replica struct {
	srv   *httptest.Server
	ready atomic.Bool
}

func newReplica(t *testing.T, name string) *replica {
	r := &replica{}
	r.ready.Store(true)
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/readyz" && !r.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, name)
	}))
	r.srv.EnableHTTP2 = true
	r.srv.StartTLS()
	t.Cleanup(r.srv.Close)
	return r
}

func TestProxySendsNewConnectionsToReadyBackendsOnly(t *testing.T) {
	a, b := newReplica(t, "a"), newReplica(t, "b")
	tlsCfg := a.srv.Client().Transport.(*http.Transport).TLSClientConfig // trusts httptest's certificate
	p, err := Start(Options{Listen: "127.0.0.1:0", Backends: []string{a.srv.Listener.Addr().String(), b.srv.Listener.Addr().String()},
		TLS: tlsCfg, ProbePeriod: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	get := func(c *http.Client) string {
		t.Helper()
		resp, err := c.Get("https://" + p.Addr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	fresh := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone(), DisableKeepAlives: true}}
	}
	seen := map[string]bool{}
	for range 4 {
		seen[get(fresh())] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("round robin reached %v, want a and b", seen)
	}

	// A kept-alive connection to a stays with a after a turns unready.
	var keep *http.Client
	var first string
	for first != "a" {
		keep = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone(), ForceAttemptHTTP2: true}}
		first = get(keep)
	}
	a.ready.Store(false)
	time.Sleep(100 * time.Millisecond)
	for range 4 {
		if got := get(fresh()); got != "b" {
			t.Fatalf("a new connection went to %s while a is unready", got)
		}
	}
	if got := get(keep); got != "a" {
		t.Errorf("the open connection moved to %s", got)
	}

	// With no ready backend, the serving (terminating) ones are used; with
	// none answering, connections are refused.
	b.ready.Store(false)
	time.Sleep(100 * time.Millisecond)
	if got := get(fresh()); got != "a" && got != "b" {
		t.Errorf("no terminating backend used: %q", got)
	}
	a.srv.Close()
	b.srv.Close()
	time.Sleep(100 * time.Millisecond)
	if _, err := fresh().Get("https://" + p.Addr() + "/"); err == nil || p.Refused() == 0 {
		t.Errorf("with no backend answering: %v, %d refused", err, p.Refused())
	}
	for _, s := range p.Stats() {
		if s.Total == 0 || !strings.HasPrefix(s.Addr, "127.0.0.1:") {
			t.Errorf("stats %+v", s)
		}
	}
}

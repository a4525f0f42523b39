// Package svcproxy stands in for a Kubernetes Service in front of deputy's
// replicas, for tests and load runs: a TCP proxy on one address that sends
// each new connection to a ready backend, round robin, as kube-proxy does
// with a Service's ready endpoints, and that learns readiness by probing each
// backend's /readyz over HTTPS like a readinessProbe. A backend that turns
// unready keeps its open connections (kube-proxy leaves established
// connections alone) and gets no new ones; with no ready backend, the
// terminating ones that still answer are used (kube-proxy's terminating
// endpoints), and with none of those a connection is refused.
//
// It must not retry a connection on another backend or buffer anything: what
// a client sees is what it would see through a Service.
package svcproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure Start.
type Options struct {
	// Listen is the proxy's address, e.g. 127.0.0.1:8443 (":0" style ports
	// pick a free one).
	Listen string
	// Backends are the replicas' addresses, host:port.
	Backends []string
	// TLS verifies the backends' serving certificates for the probes.
	TLS *tls.Config
	// ReadyPath is probed on each backend; default /readyz.
	ReadyPath string
	// ProbePeriod is the time between two probes of a backend (a
	// readinessProbe's periodSeconds, plus the time endpoints take to reach
	// kube-proxy); default 200ms.
	ProbePeriod time.Duration
	// DialTimeout bounds connecting to a backend; default 1s.
	DialTimeout time.Duration
}

// BackendStats is what the proxy knows of one backend.
type BackendStats struct {
	Addr string
	// Ready: the last probe answered 200. Serving: it answered at all.
	Ready, Serving bool
	// Active and Total count proxied connections (open now, ever).
	Active, Total int64
}

type backend struct {
	addr           string
	ready, serving atomic.Bool
	active, total  atomic.Int64
}

// Proxy is a running proxy.
type Proxy struct {
	opts     Options
	ln       net.Listener
	backends []*backend
	next     atomic.Uint64
	refused  atomic.Int64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Start listens on opts.Listen and starts probing the backends. Until a
// probe succeeds a backend gets no connections.
func Start(opts Options) (*Proxy, error) {
	if len(opts.Backends) == 0 {
		return nil, errors.New("svcproxy: no backends")
	}
	if opts.ReadyPath == "" {
		opts.ReadyPath = "/readyz"
	}
	if opts.ProbePeriod <= 0 {
		opts.ProbePeriod = 200 * time.Millisecond
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = time.Second
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("svcproxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{opts: opts, ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	for _, a := range opts.Backends {
		b := &backend{addr: a}
		p.backends = append(p.backends, b)
		p.wg.Add(1)
		go p.probe(b)
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stats returns each backend's state, in the order of Options.Backends.
func (p *Proxy) Stats() []BackendStats {
	out := make([]BackendStats, len(p.backends))
	for i, b := range p.backends {
		out[i] = BackendStats{Addr: b.addr, Ready: b.ready.Load(), Serving: b.serving.Load(), Active: b.active.Load(), Total: b.total.Load()}
	}
	return out
}

// Refused counts the connections closed at once because no backend answered
// its probe.
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// WaitReady waits until every backend is ready or ctx ends.
func (p *Proxy) WaitReady(ctx context.Context) error {
	for {
		ready := 0
		for _, b := range p.backends {
			if b.ready.Load() {
				ready++
			}
		}
		if ready == len(p.backends) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("svcproxy: %d of %d backends ready: %w", ready, len(p.backends), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close stops listening and probing and closes every proxied connection.
func (p *Proxy) Close() error {
	p.cancel()
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) probe(b *backend) {
	defer p.wg.Done()
	client := &http.Client{
		Timeout:   time.Second,
		Transport: &http.Transport{TLSClientConfig: p.opts.TLS, DisableKeepAlives: true},
	}
	url := "https://" + b.addr + p.opts.ReadyPath
	for {
		req, _ := http.NewRequestWithContext(p.ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		b.serving.Store(err == nil)
		b.ready.Store(err == nil && resp.StatusCode == http.StatusOK)
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(p.opts.ProbePeriod):
		}
	}
}

// pick returns the next ready backend, else the next serving one, else nil.
func (p *Proxy) pick() *backend {
	n := uint64(len(p.backends))
	start := p.next.Add(1)
	for _, ok := range []func(*backend) bool{
		func(b *backend) bool { return b.ready.Load() },
		func(b *backend) bool { return b.serving.Load() },
	} {
		for i := range n {
			if b := p.backends[(start+i)%n]; ok(b) {
				return b
			}
		}
	}
	return nil
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	b := p.pick()
	if b == nil {
		p.refused.Add(1)
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", b.addr, p.opts.DialTimeout)
	if err != nil {
		_ = client.Close()
		return
	}
	b.active.Add(1)
	b.total.Add(1)
	defer b.active.Add(-1)
	p.track(client, true)
	p.track(server, true)
	defer p.track(client, false)
	defer p.track(server, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done // either side closed: close both, as a dropped TCP flow would
	_ = client.Close()
	_ = server.Close()
	<-done
}

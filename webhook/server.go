package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// ServerOptions configure Server. Handlers left nil are not routed.
type ServerOptions struct {
	// Listen is HOST:PORT.
	Listen string
	// CertFile and KeyFile are the serving certificate and key, watched and
	// reloaded on change (controller-runtime certwatcher: fsnotify plus a poll).
	CertFile, KeyFile string
	// MinTLSVersion is tls.VersionTLS12 or tls.VersionTLS13.
	MinTLSVersion uint16
	// ClientAuth, when set, guards /authorize and /authenticate (and /validate
	// with RequireClientCertForValidate).
	ClientAuth                   *ClientCertAuth
	RequireClientCertForValidate bool

	Authorize    http.Handler
	Authenticate http.Handler
	Validate     http.Handler
	// API, when set, serves deputy's own API under APIPrefix. It
	// authenticates its callers itself (tokens or client certificates of any
	// name the client CA signed), so ClientAuth does not guard it.
	API *APIHandler
	// GitWebhook, when set, serves GitWebhookPath (POST /api/webhook, the
	// Git push webhook, NewGitWebhookHandler). Git servers have no client
	// certificate: the handler authenticates each delivery itself (HMAC
	// signature or shared token), so ClientAuth does not guard it.
	GitWebhook http.Handler

	// Readiness checks, besides the server's own "shutdown" check.
	Readiness []ReadinessCheck
	Metrics   *Metrics
	Log       *slog.Logger

	// ShutdownDelay keeps serving with /readyz red after ctx ends; GracePeriod
	// bounds the drain of in-flight requests after that.
	ShutdownDelay time.Duration
	GracePeriod   time.Duration
	// BeforeStop, if set, is called once ctx ends, while the server still
	// serves (with /readyz red); the server stops accepting connections
	// only after it has returned and ShutdownDelay has passed. It must
	// bound its own duration. Run waits here for the syncs to drain and the
	// Lease to be released: kube-apiserver may authorize their requests
	// through this very server.
	BeforeStop func()
	// OnListen, if set, is called with the bound address once the server listens.
	OnListen func(net.Addr)
}

// Server is deputy's HTTPS server.
type Server struct {
	opts         ServerOptions
	shuttingDown atomic.Bool
}

// closeWhileShuttingDown answers HTTP/1.1 requests with Connection: close
// once shutdown has begun, so that keep-alive clients reconnect (through the
// Service, to a ready replica) during ShutdownDelay instead of losing a
// request on a connection Shutdown closes while idle (a POST is not retried).
// HTTP/2 clients move on the GOAWAY Shutdown sends, which they retry.
func (s *Server) closeWhileShuttingDown(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && s.shuttingDown.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// NewServer returns a server; Run starts it.
func NewServer(opts ServerOptions) *Server { return &Server{opts: opts} }

// Handler builds the router: review endpoints behind metrics and client
// authentication, plus /healthz, /livez, /readyz and /metrics.
func (s *Server) Handler() http.Handler {
	o := s.opts
	r := chi.NewRouter()
	// The request ID comes first so that a recovered panic is answered and
	// logged with the ID of the request that caused it.
	r.Use(withRequestID, recoverPanics(o.Log), s.closeWhileShuttingDown)

	guard := func(h http.Handler, required bool) http.Handler {
		if o.ClientAuth != nil && required {
			return o.ClientAuth.Require(h)
		}
		return h
	}
	if o.Authorize != nil {
		r.Handle("/authorize", o.Metrics.instrument("authorize", guard(o.Authorize, true)))
	}
	if o.Authenticate != nil {
		r.Handle("/authenticate", o.Metrics.instrument("authenticate", guard(o.Authenticate, true)))
	}
	if o.Validate != nil {
		r.Handle("/validate", o.Metrics.instrument("validate", guard(o.Validate, o.RequireClientCertForValidate)))
	}
	if o.API != nil {
		// Every /apis path: deputy.dev, the aggregated group, discovery.
		api := o.Metrics.instrument("api", o.API)
		r.Handle("/apis", api)
		r.Handle("/apis/*", api)
	}
	if o.GitWebhook != nil {
		// Every method, so that the handler answers 405 as a metav1.Status.
		r.Handle(GitWebhookPath, o.Metrics.instrument("git_webhook", o.GitWebhook))
	}
	r.Get("/healthz", healthz)
	r.Get("/livez", healthz)
	checks := append([]ReadinessCheck{{Name: "shutdown", Check: func() error {
		if s.shuttingDown.Load() {
			return errors.New("deputy is shutting down")
		}
		return nil
	}}}, o.Readiness...)
	r.Get("/readyz", readyz(checks))
	r.Handle("/metrics", o.Metrics.Handler())
	return r
}

// Run serves until ctx ends, then turns /readyz red, waits ShutdownDelay
// and for BeforeStop (run meanwhile) to return, and drains in-flight
// requests for up to GracePeriod (SIGTERM handling).
//
// Errors: the certificate cannot be loaded, the address cannot be bound, or
// the drain did not finish within GracePeriod.
func (s *Server) Run(ctx context.Context) error {
	o := s.opts
	cw, err := certwatcher.New(o.CertFile, o.KeyFile)
	if err != nil {
		return fmt.Errorf("failed to load serving certificate %s / %s: %w", o.CertFile, o.KeyFile, err)
	}
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	go func() {
		if err := cw.Start(watchCtx); err != nil {
			o.Log.Error("serving certificate watcher stopped", "error", err.Error())
		}
	}()

	tlsConfig := &tls.Config{
		MinVersion:             o.MinTLSVersion,
		GetCertificate:         cw.GetCertificate,
		SessionTicketsDisabled: true,
		NextProtos:             []string{"h2", "http/1.1"},
	}
	if o.ClientAuth != nil || o.API != nil {
		// Verified per request: by ClientCertAuth (see its doc) and by the
		// API's x509 and front-proxy authenticators.
		tlsConfig.ClientAuth = tls.RequestClientCert
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", o.Listen, err)
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return ConnContext(ctx, c) },
		ErrorLog:          slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
	}
	if o.API != nil {
		// Watch streams last as long as a sync; end them when draining starts.
		srv.RegisterOnShutdown(o.API.CloseStreams)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	o.Log.Info("serving", "address", ln.Addr().String())
	if o.OnListen != nil {
		o.OnListen(ln.Addr())
	}

	select {
	case err := <-errc:
		return fmt.Errorf("server stopped: %w", err)
	case <-ctx.Done():
	}
	s.shuttingDown.Store(true)
	o.Log.Info("shutting down", "delay", o.ShutdownDelay.String(), "gracePeriod", o.GracePeriod.String())
	var before chan struct{}
	if o.BeforeStop != nil {
		before = make(chan struct{})
		go func() {
			defer close(before)
			o.BeforeStop()
		}()
	}
	if o.ShutdownDelay > 0 {
		time.Sleep(o.ShutdownDelay)
	}
	if before != nil {
		select {
		case <-before:
		case err := <-errc:
			return fmt.Errorf("server stopped: %w", err)
		}
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), o.GracePeriod)
	defer cancel()
	if err := srv.Shutdown(drainCtx); err != nil {
		return fmt.Errorf("failed to drain in-flight requests within %s: %w", o.GracePeriod, err)
	}
	o.Log.Info("stopped")
	return nil
}

package webhook

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
)

// ClientCertAuth authenticates review callers by client certificate with
// k8s.io/apiserver's x509 request authenticator (the one kube-apiserver uses
// for --client-ca-file) and checks the certificate's common name against an
// allow list, like --requestheader-allowed-names. A caller without a valid
// certificate, or with a name not allowed, gets 401.
//
// The TLS layer only requests a certificate (tls.RequestClientCert), as
// kube-apiserver does, so that a bad certificate is a 401 with a reason in the
// log instead of a handshake failure, and so that /healthz, /readyz and
// /metrics stay reachable without one.
type ClientCertAuth struct {
	verifyOptions x509request.VerifyOptionFunc
	authn         *x509request.Authenticator
	allowedNames  []string
	log           *slog.Logger
}

// NewClientCertAuth returns the middleware factory. verifyOptions supplies the
// current client CA (it may change at run time: dynamiccertificates'
// DynamicFileCAContent.VerifyOptions). allowedNames empty allows every
// certificate the CA signed.
func NewClientCertAuth(verifyOptions x509request.VerifyOptionFunc, allowedNames []string, log *slog.Logger) *ClientCertAuth {
	return &ClientCertAuth{
		verifyOptions: verifyOptions,
		authn:         x509request.NewDynamic(verifyOptions, x509request.CommonNameUserConversion),
		allowedNames:  slices.Clone(allowedNames),
		log:           log,
	}
}

// connVerification memoises one connection's successful verification. A TLS
// connection's peer certificates never change, so re-verifying the chain on
// every request of a keep-alive connection (what kube-apiserver's filter does)
// only burns CPU on the hot path. The memo is keyed by the CA pool in use, so a
// rotated client CA re-verifies, and expires with the leaf certificate.
type connVerification struct {
	mu       sync.Mutex
	roots    *x509.CertPool
	notAfter time.Time
	name     string
}

type connVerificationKey struct{}

// maxVerificationMemo bounds how long a connection's verification is reused,
// so the expiry of an intermediate or root certificate is noticed too.
const maxVerificationMemo = 5 * time.Minute

// ConnContext is the http.Server ConnContext hook that gives each connection
// its memo.
func ConnContext(ctx context.Context, _ any) context.Context {
	return context.WithValue(ctx, connVerificationKey{}, &connVerification{})
}

// Require wraps next so that it runs only for an authenticated, allowed caller.
func (c *ClientCertAuth) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := c.authenticate(r)
		if !ok {
			writeStatus(w, newStatusError(http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
				"Unauthorized: a client certificate signed by deputy's client CA with an allowed common name is required"))
			return
		}
		next.ServeHTTP(w, r.WithContext(withCaller(r.Context(), name)))
	})
}

func (c *ClientCertAuth) authenticate(r *http.Request) (string, bool) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		c.log.Debug("review request without client certificate", "remote", r.RemoteAddr, "path", r.URL.Path)
		return "", false
	}
	opts, ok := c.verifyOptions()
	if !ok {
		return "", false
	}
	memo, _ := r.Context().Value(connVerificationKey{}).(*connVerification)
	now := time.Now()
	if memo != nil {
		memo.mu.Lock()
		hit := memo.roots == opts.Roots && now.Before(memo.notAfter)
		name := memo.name
		memo.mu.Unlock()
		if hit {
			return name, true
		}
	}
	resp, ok, err := c.authn.AuthenticateRequest(r)
	if err != nil || !ok {
		c.log.Info("client certificate rejected", "remote", r.RemoteAddr, "path", r.URL.Path, "error", errString(err))
		return "", false
	}
	name := resp.User.GetName()
	if len(c.allowedNames) > 0 && !slices.Contains(c.allowedNames, name) {
		c.log.Info("client certificate name not allowed", "remote", r.RemoteAddr, "path", r.URL.Path, "name", name, "allowed", c.allowedNames)
		return "", false
	}
	if memo != nil {
		memo.mu.Lock()
		notAfter := now.Add(maxVerificationMemo)
		if leaf := r.TLS.PeerCertificates[0]; leaf.NotAfter.Before(notAfter) {
			notAfter = leaf.NotAfter
		}
		memo.roots, memo.notAfter, memo.name = opts.Roots, notAfter, name
		memo.mu.Unlock()
	}
	return name, true
}

func errString(err error) string {
	if err == nil {
		return "no verified chain"
	}
	return err.Error()
}

// caller identity in the request context, for logs.
type callerKey struct{}

func withCaller(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, callerKey{}, name)
}

// authenticator is referenced so the interface contract is checked at compile time.
var _ authenticator.Request = (*x509request.Authenticator)(nil)

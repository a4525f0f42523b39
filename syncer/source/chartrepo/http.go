package chartrepo

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"deputy.dev/deputy/syncer/source/limit"
)

// maxRedirects bounds the redirects one request follows (net/http's
// default too).
const maxRedirects = 10

// baseTransport is net/http's default transport as the process started:
// system roots (SSL_CERT_FILE and SSL_CERT_DIR are honoured), the
// environment's proxy.
var baseTransport = http.DefaultTransport.(*http.Transport).Clone()

// origin is a URL's scheme, lower-case host and port (the scheme's default
// when absent): what a credential is bound to.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		default:
			port = "443"
		}
	}
	return u.Scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// loopback reports whether host is this machine (plain http is accepted
// there only, as for Git).
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkScheme refuses a request deputy must not make: anything but https,
// or http to loopback.
func checkScheme(u *url.URL) error {
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && loopback(u.Hostname()):
		return nil
	case u.Scheme == "http":
		return fmt.Errorf("refusing plain http to %s (only loopback may be reached over http): serve the repository over https", u.Host)
	}
	return fmt.Errorf("refusing to fetch %s: only https:// (and http:// on loopback) is fetched", redact(u))
}

// redact is u without user info, query and fragment, for messages.
func redact(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.Fragment = nil, "", ""
	return c.String()
}

// credScope is where a fetch's credential may go: the repository's origin
// and its path, the repository the credential was matched for and the
// project permitted. A credential configured for a whole host reaches the
// other paths of that host (another tenant's repository) only through
// their own repoURL, never through a chart URL or a redirect a tenant's
// index.yaml or server names.
type credScope struct {
	origin string
	// path is the repository's decoded path without trailing slashes
	// ("" for the root).
	path string
}

// scopeOf is the credential scope of the repository URL u.
func scopeOf(u *url.URL) credScope {
	return credScope{origin: origin(u), path: strings.TrimRight(u.Path, "/")}
}

// covers reports whether a request to u may carry the credential: same
// origin, and a path with one reading (no dot segments, encoded slashes or
// backslashes, which a server may resolve elsewhere) at or below the
// repository's path on a '/' boundary.
func (c credScope) covers(u *url.URL) bool {
	if origin(u) != c.origin {
		return false
	}
	escaped := strings.ToLower(u.EscapedPath())
	if strings.Contains(escaped, "%2f") || strings.Contains(escaped, "%5c") || strings.Contains(u.Path, `\`) {
		return false
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return c.path == "" || u.Path == c.path || strings.HasPrefix(u.Path, c.path+"/")
}

// transport is the HTTP transport of one fetch: every request must pass
// checkScheme; basic auth is added only to requests credScope covers (so
// that neither a chart URL of index.yaml nor a redirect to another scheme,
// host, port or path gets it); every response body is bounded
// by Limits.MaxFetchBytes, and the first limit exceeded is kept (libraries
// such as oras wrap or replace a body's error).
type transport struct {
	base      http.RoundTripper
	cred      *Credential
	credScope credScope
	// httpsOnly refuses plain http (also to loopback): the repository is
	// https, and what its index or server names must not take the fetch to
	// plain http on loopback (a sidecar's or deputy's own port) no project
	// permitted.
	httpsOnly bool
	maxBytes  int64

	mu       sync.Mutex
	exceeded *limit.Error
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := checkScheme(req.URL); err != nil {
		return nil, err
	}
	if t.httpsOnly && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("refusing plain http to %s: the repository is served over https, and every request of its fetch (chart URLs, redirects, token realms) stays on https", req.URL.Host)
	}
	if t.cred != nil && t.credScope.covers(req.URL) && req.Header.Get("Authorization") == "" {
		req = req.Clone(req.Context())
		req.SetBasicAuth(t.cred.Username, t.cred.Password)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
			return nil, fmt.Errorf("%w: if the repository's certificate is issued by a private CA, trust it with SSL_CERT_FILE (or SSL_CERT_DIR) in deputy's environment", err)
		}
		return nil, err
	}
	if resp.ContentLength > t.maxBytes {
		resp.Body.Close()
		return nil, t.exceed(fmt.Sprintf("the response of %s (%s)", redact(req.URL), limit.Bytes(resp.ContentLength)))
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, left: t.maxBytes, t: t, what: redact(req.URL)}
	return resp, nil
}

func (t *transport) exceed(what string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exceeded == nil {
		t.exceeded = &limit.Error{Field: limit.FieldMaxFetchBytes, What: what, Limit: limit.Bytes(t.maxBytes)}
	}
	return t.exceeded
}

// limitErr is the first limit a response exceeded, nil if none.
func (t *transport) limitErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exceeded == nil {
		return nil
	}
	return t.exceeded
}

// boundedBody fails a body that goes past its limit.
type boundedBody struct {
	io.ReadCloser
	left int64
	t    *transport
	what string
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := b.ReadCloser.Read(one[:]); n > 0 {
			return 0, b.t.exceed(fmt.Sprintf("the response of %s (more than %s)", b.what, limit.Bytes(b.t.maxBytes)))
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// newClient is the HTTP client of one fetch with cred for scope only;
// httpsOnly for a repository served over https. A redirect may not leave
// https, and one to another origin loses any Authorization header the
// caller set (net/http keeps it for a subdomain).
func newClient(base http.RoundTripper, cred *Credential, scope credScope, httpsOnly bool, maxBytes int64) (*http.Client, *transport) {
	if base == nil {
		base = baseTransport
	}
	t := &transport{base: base, cred: cred, credScope: scope, httpsOnly: httpsOnly, maxBytes: maxBytes}
	return &http.Client{Transport: t, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("refusing the redirect from %s to %s: it leaves https", redact(via[0].URL), redact(req.URL))
		}
		if origin(req.URL) != origin(via[0].URL) {
			req.Header.Del("Authorization")
		}
		return nil
	}}, t
}

// get reads url's body within the client's limits. Errors name the URL and
// say what to fix for 401/403 (credHint) and 404 (notFound).
func get(ctx context.Context, c *http.Client, t *transport, rawURL, credHint, notFound string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to fetch %s: %w", rawURL, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		if lerr := t.limitErr(); lerr != nil {
			return nil, lerr
		}
		return nil, fmt.Errorf("failed to fetch %s: %w", redact(req.URL), unwrapURLError(err))
	}
	defer resp.Body.Close()
	switch {
	case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && resp.Request != nil && origin(resp.Request.URL) != origin(req.URL):
		return nil, fmt.Errorf("failed to fetch %s: %s from %s: %s", redact(req.URL), resp.Status, redact(resp.Request.URL), redirectedHint(req.URL.Host))
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("failed to fetch %s: %s: %s", redact(req.URL), resp.Status, credHint)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("failed to fetch %s: %s: %s", redact(req.URL), resp.Status, notFound)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("failed to fetch %s: %s", redact(req.URL), resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		if lerr := t.limitErr(); lerr != nil {
			return nil, lerr
		}
		return nil, fmt.Errorf("failed to read %s: %w", redact(req.URL), err)
	}
	return data, nil
}

// unwrapURLError drops *url.Error's "Get URL:" prefix (the caller names the
// URL, without user info).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

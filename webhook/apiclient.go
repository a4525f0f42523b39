package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// APIClientOptions configure NewAPIClient.
type APIClientOptions struct {
	// Server is deputy's base URL, https://HOST:PORT.
	Server string
	// CAFile verifies deputy's serving certificate; "" uses the system roots.
	CAFile string
	// Token is sent as a bearer token; "" sends none.
	Token string
	// CertFile and KeyFile are a client certificate (signed by deputy's
	// client CA) to present instead of a token.
	CertFile, KeyFile string
}

// APIClient calls deputy's own API, the counterpart of APIHandler (`deputy
// sync` uses it). It never logs, and puts the token only into the
// Authorization header.
type APIClient struct {
	base   *url.URL
	http   *http.Client
	token  string
	caFile string
}

// apiDialTimeout bounds connecting to deputy; a watch itself has no time
// limit (a sync may run for minutes), only the caller's context.
const apiDialTimeout = 10 * time.Second

// NewAPIClient returns a client for opts.
//
// Errors: a server that is not an https:// (or http://) URL, and CA or client
// certificate files that cannot be read, naming the file.
func NewAPIClient(opts APIClientOptions) (*APIClient, error) {
	u, err := url.Parse(opts.Server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("server %q must be deputy's URL, e.g. https://127.0.0.1:8443", opts.Server)
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("failed to read the CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", opts.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	if opts.CertFile != "" || opts.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("failed to load the client certificate %s / %s: %w", opts.CertFile, opts.KeyFile, err)
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: apiDialTimeout}).DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: apiDialTimeout,
		ForceAttemptHTTP2:   true,
	}
	return &APIClient{base: u, http: &http.Client{Transport: transport}, token: opts.Token, caFile: opts.CAFile}, nil
}

// CertificateError is a failure to verify deputy's serving certificate: it
// is signed by a CA the client does not trust (the usual case: deputy's own
// CA was not given), names other hosts, or is not valid now.
type CertificateError struct {
	// Server is deputy's URL.
	Server string
	// CAFile is the CA file the certificate was verified with; "" means the
	// system's trusted roots.
	CAFile string
	// Err is crypto/x509's error: x509.UnknownAuthorityError,
	// x509.HostnameError or x509.CertificateInvalidError.
	Err error
}

func (e *CertificateError) Error() string {
	roots := "the system's trusted CAs"
	if e.CAFile != "" {
		roots = "the CA in " + e.CAFile
	}
	return fmt.Sprintf("failed to reach deputy at %s: its serving certificate does not verify with %s: %v", e.Server, roots, e.Err)
}

func (e *CertificateError) Unwrap() error { return e.Err }

// UnknownAuthority reports whether the certificate is signed by a CA the
// client was not given (rather than naming other hosts, or having expired).
func (e *CertificateError) UnknownAuthority() bool {
	var unknown x509.UnknownAuthorityError
	return errors.As(e.Err, &unknown)
}

// asCertificateError returns the certificate verification failure inside a
// transport error, or nil.
func asCertificateError(err error) *CertificateError {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknown):
		return &CertificateError{Err: unknown}
	case errors.As(err, &hostname):
		return &CertificateError{Err: hostname}
	case errors.As(err, &invalid):
		return &CertificateError{Err: invalid}
	}
	return nil
}

// APIError is an answer other than success: the metav1.Status deputy sent
// (or one made from the status line when the body is not a Status).
type APIError struct {
	Status metav1.Status
}

func (e *APIError) Error() string { return e.Status.Message }

func (c *APIClient) applicationURL(namespace, name string) string {
	return strings.TrimSuffix(c.base.String(), "/") + APIPrefix + "/namespaces/" + url.PathEscape(namespace) + "/applications/" + url.PathEscape(name)
}

func (c *APIClient) do(ctx context.Context, method, u string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, "+APIStreamContentType)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if certErr := asCertificateError(err); certErr != nil {
			certErr.Server, certErr.CAFile = c.base.String(), c.caFile
			return nil, certErr
		}
		return nil, fmt.Errorf("failed to reach deputy at %s: %w", c.base, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// apiErrorBodyLimit bounds how much of an error body is read.
const apiErrorBodyLimit = 64 << 10

func readAPIError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, apiErrorBodyLimit))
	var st metav1.Status
	if err := json.Unmarshal(data, &st); err == nil && st.Kind == "Status" && st.Message != "" {
		return &APIError{Status: st}
	}
	msg := strings.TrimSpace(string(data))
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &APIError{Status: metav1.Status{Status: metav1.StatusFailure, Code: int32(resp.StatusCode),
		Message: fmt.Sprintf("deputy answered %s: %s", resp.Status, msg)}}
}

// Sync starts a sync of namespace/name and returns its Running state.
//
// Errors: *APIError for deputy's refusals (401, 403, 404, 409, ...), and
// transport errors.
func (c *APIClient) Sync(ctx context.Context, namespace, name string, op v1alpha1.SyncOperation) (*v1alpha1.OperationState, error) {
	body, err := json.Marshal(op)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, http.MethodPost, c.applicationURL(namespace, name)+"/sync", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st v1alpha1.OperationState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("failed to decode deputy's answer: %w", err)
	}
	return &st, nil
}

// Application returns namespace/name with its status.
//
// Errors: as Sync.
func (c *APIClient) Application(ctx context.Context, namespace, name string) (*v1alpha1.Application, error) {
	resp, err := c.do(ctx, http.MethodGet, c.applicationURL(namespace, name), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var app v1alpha1.Application
	if err := json.NewDecoder(resp.Body).Decode(&app); err != nil {
		return nil, fmt.Errorf("failed to decode deputy's answer: %w", err)
	}
	return &app, nil
}

// ErrWatchEnded is returned by Watch when the stream ends before the
// operation does (deputy restarted, a proxy cut the connection).
var ErrWatchEnded = errors.New("the progress stream ended before the operation finished")

// Watch follows the current operation of namespace/name, calling each for
// every event in order, and returns the final state (a phase other than
// Running).
//
// Errors: those of Sync, an error of each (which stops the watch),
// ErrWatchEnded, and undecodable stream content.
func (c *APIClient) Watch(ctx context.Context, namespace, name string, each func(syncer.Event) error) (*v1alpha1.OperationState, error) {
	resp, err := c.do(ctx, http.MethodGet, c.applicationURL(namespace, name)+"?watch=true", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	var last *v1alpha1.OperationState
	for {
		var ev syncer.Event
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("failed to read the progress stream: %w", err)
		}
		if ev.Type == syncer.EventState && ev.State != nil {
			last = ev.State
		}
		if each != nil {
			if err := each(ev); err != nil {
				return nil, err
			}
		}
	}
	if last == nil || last.Phase == v1alpha1.OperationRunning {
		return last, ErrWatchEnded
	}
	return last, nil
}

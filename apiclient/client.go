package apiclient

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
	"strings"
	"time"

	"deputy.dev/deputy/internal/secretfile"
	"deputy.dev/deputy/policy/v1alpha1"
)

// Options configure New.
type Options struct {
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

// Client calls deputy's own API, the counterpart of webhook.APIHandler
// (`deputy sync` and `deputy diff` use it). It never logs, and puts the token only into the
// Authorization header.
type Client struct {
	base   *url.URL
	http   *http.Client
	token  string
	caFile string
}

// dialTimeout bounds connecting to deputy; a watch itself has no time limit
// (a sync may run for minutes), only the caller's context.
const dialTimeout = 10 * time.Second

// New returns a client for opts.
//
// Errors: a server that is not an https:// (or http://) URL, and CA or client
// certificate files that cannot be read, naming the file.
func New(opts Options) (*Client, error) {
	u, err := url.Parse(opts.Server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("server %q must be deputy's URL, e.g. https://127.0.0.1:8443", opts.Server)
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if opts.CAFile != "" {
		pem, err := secretfile.Read(opts.CAFile, secretfile.MaxBytes)
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
		DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: dialTimeout,
		ForceAttemptHTTP2:   true,
	}
	return &Client{base: u, http: &http.Client{Transport: transport}, token: opts.Token, caFile: opts.CAFile}, nil
}

func (c *Client) applicationURL(namespace, name string) string {
	return strings.TrimSuffix(c.base.String(), "/") + v1alpha1.APIPath + "/namespaces/" + url.PathEscape(namespace) + "/applications/" + url.PathEscape(name)
}

func (c *Client) do(ctx context.Context, method, u string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, "+v1alpha1.OperationStreamContentType)
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
		return nil, readStatusError(resp)
	}
	return resp, nil
}

// Sync starts a sync of namespace/name and returns its Running state.
//
// Errors: *StatusError for deputy's refusals (401, 403, 404, 409, ...),
// *CertificateError when deputy's serving certificate does not verify, and
// other transport errors.
func (c *Client) Sync(ctx context.Context, namespace, name string, op v1alpha1.SyncOperation) (*v1alpha1.OperationState, error) {
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

// Application reads namespace/name with its status as deputy knows it
// (GET .../applications/NAME): status.operationState, status.sync,
// status.health and status.resources.
//
// Errors: those of Sync (a *StatusError 404 for an unknown Application),
// and an answer that does not decode.
func (c *Client) Application(ctx context.Context, namespace, name string) (*v1alpha1.Application, error) {
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

// Diff asks deputy what a sync of namespace/name would change
// (GET .../applications/NAME/diff): the rendered target dry-run on the
// destination as the derived ServiceAccount, compared with the live
// objects. op selects the revisions (Revision for spec.source, Revisions,
// one per source, for spec.sources; empty: the targetRevisions); its other
// fields are ignored. The call lasts as long as the diff (up to deputy's
// sync.limits.operationTimeout): bound it with ctx.
//
// Errors: those of Sync (*StatusError: 404 unknown Application, 403, 422
// the Application cannot be diffed, 429 too many diffs at once with
// Details.RetryAfterSeconds, 503 destination or engine unavailable, 504),
// and an answer that does not decode.
func (c *Client) Diff(ctx context.Context, namespace, name string, op v1alpha1.SyncOperation) (*v1alpha1.ApplicationDiff, error) {
	q := url.Values{}
	if op.Revision != "" {
		q.Set("revision", op.Revision)
	}
	for _, r := range op.Revisions {
		q.Add("revisions", r)
	}
	u := c.applicationURL(namespace, name) + "/diff"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return c.diff(ctx, http.MethodGet, u, nil)
}

// DiffLocal asks deputy what a sync of namespace/name would change if its
// sources rendered objects (POST .../applications/NAME/diff with a
// v1alpha1.LocalDiffRequest: deputy diff --local): the same dry runs as
// Diff, as the same ServiceAccount, with the same project checks of every
// object; the answer has no revisions. objects are Kubernetes manifests
// (apiVersion, kind, metadata.name), at least one, at most
// v1alpha1.MaxLocalDiffRequestBytes encoded. The caller needs verb create
// on applications/diff.
//
// Errors: those of Diff, 400 for an object deputy refuses (its index
// named), 413 for a body above the limit.
func (c *Client) DiffLocal(ctx context.Context, namespace, name string, objects []map[string]any) (*v1alpha1.ApplicationDiff, error) {
	req := struct {
		Objects []map[string]any `json:"objects"`
	}{Objects: objects}
	if req.Objects == nil {
		req.Objects = []map[string]any{}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("failed to encode the manifests: %w", err)
	}
	if len(body) > v1alpha1.MaxLocalDiffRequestBytes {
		return nil, fmt.Errorf("the manifests encode to %d bytes, more than deputy's limit of %d: diff fewer or smaller manifests", len(body), v1alpha1.MaxLocalDiffRequestBytes)
	}
	return c.diff(ctx, http.MethodPost, c.applicationURL(namespace, name)+"/diff", body)
}

// diff sends a diff request and decodes the ApplicationDiff.
func (c *Client) diff(ctx context.Context, method, u string, body []byte) (*v1alpha1.ApplicationDiff, error) {
	resp, err := c.do(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var d v1alpha1.ApplicationDiff
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return nil, fmt.Errorf("failed to decode deputy's answer: %w", err)
	}
	return &d, nil
}

// ErrWatchEnded is returned by Watch when the stream ends before the
// operation does (deputy restarted, a proxy cut the connection).
var ErrWatchEnded = errors.New("the progress stream ended before the operation finished")

// Watch follows the current operation of namespace/name, calling each for
// every event in order, and returns the final state (a phase other than
// Running). A failed attempt waiting for its retry (a Running state with
// nextRetryAt) is not the end: the stream goes on with the retry.
//
// Errors: those of Sync, an error of each (which stops the watch),
// ErrWatchEnded (with the last state seen, if any), and undecodable stream
// content.
func (c *Client) Watch(ctx context.Context, namespace, name string, each func(v1alpha1.OperationEvent) error) (*v1alpha1.OperationState, error) {
	resp, err := c.do(ctx, http.MethodGet, c.applicationURL(namespace, name)+"?watch=true", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	var last *v1alpha1.OperationState
	for {
		var ev v1alpha1.OperationEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("failed to read the progress stream: %w", err)
		}
		if ev.Type == v1alpha1.OperationEventState && ev.State != nil {
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

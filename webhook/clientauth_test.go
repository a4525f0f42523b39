package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// pool returns a new pool holding the CA: every call is a new *x509.CertPool,
// like a client CA file that was reloaded.
func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

var serial atomic.Int64

// issue returns a client certificate with common name cn, valid until notAfter.
func (ca *testCA) issue(t *testing.T, cn string, notAfter time.Time, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(100 + serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"system:masters"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) client(t *testing.T, cn string) tls.Certificate {
	return ca.issue(t, cn, time.Now().Add(time.Hour), x509.ExtKeyUsageClientAuth)
}

// switchableVerifier is a VerifyOptionFunc whose options a test can swap and
// whose calls it counts.
type switchableVerifier struct {
	opts  atomic.Pointer[x509.VerifyOptions]
	ok    atomic.Bool
	calls atomic.Int64
}

func newSwitchableVerifier(roots *x509.CertPool) *switchableVerifier {
	v := &switchableVerifier{}
	v.set(roots, x509.ExtKeyUsageClientAuth)
	v.ok.Store(true)
	return v
}

func (v *switchableVerifier) set(roots *x509.CertPool, usages ...x509.ExtKeyUsage) {
	v.opts.Store(&x509.VerifyOptions{Roots: roots, KeyUsages: usages})
}

func (v *switchableVerifier) VerifyOptions() (x509.VerifyOptions, bool) {
	v.calls.Add(1)
	return *v.opts.Load(), v.ok.Load()
}

// callerSeen records the caller names the review handlers saw.
type callerSeen struct {
	mu    sync.Mutex
	names []string
}

func (c *callerSeen) add(ctx context.Context) {
	name, _ := ctx.Value(callerKey{}).(string)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, name)
}

type clientAuthServer struct {
	*httptest.Server
	callers *callerSeen
}

// newClientAuthServer runs the real Server.Handler behind TLS that requests
// (not requires) client certificates, with the per-connection memo, as Run
// does.
func newClientAuthServer(t *testing.T, verify x509request.VerifyOptionFunc, allowedNames []string, requireForValidate, http2 bool) *clientAuthServer {
	t.Helper()
	callers := &callerSeen{}
	m := NewMetrics()
	authz := authorizer.AuthorizerFunc(func(ctx context.Context, _ authorizer.Attributes) (authorizer.Decision, string, error) {
		callers.add(ctx)
		return authorizer.DecisionAllow, "", nil
	})
	rev := fakeReviewer(func(ctx context.Context, _ authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
		callers.add(ctx)
		return authenticationv1.TokenReviewStatus{}, nil
	})
	adm := admission.HandlerFunc(func(ctx context.Context, _ admission.Request) admission.Response {
		return admission.Allowed("")
	})
	s := NewServer(ServerOptions{
		ClientAuth:                   NewClientCertAuth(verify, allowedNames, discardLog()),
		RequireClientCertForValidate: requireForValidate,
		Authorize:                    &AuthorizeHandler{Authorizer: authz, Metrics: m, Log: discardLog()},
		Authenticate:                 &AuthenticateHandler{Reviewer: rev, Metrics: m, Log: discardLog()},
		Validate:                     quietValidateHandler(adm, m),
		Metrics:                      m,
		Log:                          discardLog(),
	})
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.EnableHTTP2 = http2
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return ConnContext(ctx, c) }
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &clientAuthServer{Server: srv, callers: callers}
}

// client returns a client of srv presenting certs, with its own connections.
func (s *clientAuthServer) client(certs ...tls.Certificate) *http.Client {
	tr := s.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.Certificates = certs
	return &http.Client{Transport: tr}
}

// traced sends a request and reports whether it went over a reused connection.
func traced(t *testing.T, c *http.Client, method, url, body string) (response, bool) {
	t.Helper()
	var reused bool
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	})
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: b}, reused
}

const unauthorizedMessage = "Unauthorized: a client certificate signed by deputy's client CA with an allowed common name is required"

func TestClientCertAuth(t *testing.T) {
	ca := newTestCA(t, "deputy-client-ca")
	other := newTestCA(t, "someone-else")
	allowed := []string{"kube-apiserver", "kube-apiserver-2"}
	verify := x509request.StaticVerifierFn(x509.VerifyOptions{Roots: ca.pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

	tests := []struct {
		name               string
		certs              []tls.Certificate
		allowedNames       []string
		requireForValidate bool
		verify             x509request.VerifyOptionFunc
		method             string
		path               string
		body               string
		wantCode           int
		wantCaller         string
	}{
		{name: "a review without a certificate is unauthorized", path: "/authorize", body: sarV1Body, wantCode: 401},
		{name: "a token review without a certificate is unauthorized", path: "/authenticate", body: trV1Body, wantCode: 401},
		{name: "a GET without a certificate is unauthorized before it is a wrong method", method: http.MethodGet, path: "/authorize", wantCode: 401},
		{name: "an admission review without a certificate is answered when validate is open", path: "/validate", body: arV1Body, wantCode: 200},
		{name: "an admission review without a certificate is unauthorized when validate requires one", path: "/validate", body: arV1Body, requireForValidate: true, wantCode: 401},
		{name: "an admission review with an allowed certificate is answered when validate requires one", path: "/validate", body: arV1Body, requireForValidate: true, certs: []tls.Certificate{ca.client(t, "kube-apiserver")}, wantCode: 200},
		{name: "a certificate from another CA is unauthorized", path: "/authorize", body: sarV1Body, certs: []tls.Certificate{other.client(t, "kube-apiserver")}, wantCode: 401},
		{name: "a self-signed certificate is unauthorized", path: "/authenticate", body: trV1Body, certs: []tls.Certificate{newTestCA(t, "kube-apiserver").client(t, "kube-apiserver")}, wantCode: 401},
		{name: "an allowed name is answered", path: "/authorize", body: sarV1Body, certs: []tls.Certificate{ca.client(t, "kube-apiserver")}, wantCode: 200, wantCaller: "kube-apiserver"},
		{name: "another allowed name is answered", path: "/authenticate", body: trV1Body, certs: []tls.Certificate{ca.client(t, "kube-apiserver-2")}, wantCode: 200, wantCaller: "kube-apiserver-2"},
		{name: "a common name that is not allowed is unauthorized", path: "/authorize", body: sarV1Body, certs: []tls.Certificate{ca.client(t, "mallory")}, wantCode: 401},
		{name: "allowed names compare exactly", path: "/authorize", body: sarV1Body, certs: []tls.Certificate{ca.client(t, "Kube-Apiserver")}, wantCode: 401},
		{name: "an allowed name as a prefix is not allowed", path: "/authorize", body: sarV1Body, certs: []tls.Certificate{ca.client(t, "kube-apiserver-evil")}, wantCode: 401},
		{name: "an empty allow list admits every name the CA signed", path: "/authorize", body: sarV1Body, allowedNames: []string{}, certs: []tls.Certificate{ca.client(t, "anyone")}, wantCode: 200, wantCaller: "anyone"},
		{name: "an empty allow list still requires the CA", path: "/authorize", body: sarV1Body, allowedNames: []string{}, certs: []tls.Certificate{other.client(t, "anyone")}, wantCode: 401},
		{name: "an expired certificate is unauthorized", path: "/authorize", body: sarV1Body, certs: []tls.Certificate{ca.issue(t, "kube-apiserver", time.Now().Add(-time.Minute), x509.ExtKeyUsageClientAuth)}, wantCode: 401},
		{name: "a serving certificate is not a client certificate", path: "/authorize", body: sarV1Body, certs: []tls.Certificate{ca.issue(t, "kube-apiserver", time.Now().Add(time.Hour), x509.ExtKeyUsageServerAuth)}, wantCode: 401},
		{
			name: "no client CA configured is unauthorized", path: "/authorize", body: sarV1Body, certs: []tls.Certificate{ca.client(t, "kube-apiserver")},
			verify: func() (x509.VerifyOptions, bool) { return x509.VerifyOptions{}, false }, wantCode: 401,
		},
		{name: "/healthz needs no certificate", method: http.MethodGet, path: "/healthz", wantCode: 200},
		{name: "/livez needs no certificate", method: http.MethodGet, path: "/livez", wantCode: 200},
		{name: "/readyz needs no certificate", method: http.MethodGet, path: "/readyz", wantCode: 200},
		{name: "/metrics needs no certificate", method: http.MethodGet, path: "/metrics", wantCode: 200},
		{name: "/healthz with a foreign certificate is still answered", method: http.MethodGet, path: "/healthz", certs: []tls.Certificate{other.client(t, "x")}, wantCode: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			names := allowed
			if tc.allowedNames != nil {
				names = tc.allowedNames
			}
			v := verify
			if tc.verify != nil {
				v = tc.verify
			}
			srv := newClientAuthServer(t, v, names, tc.requireForValidate, false)
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			got, _ := traced(t, srv.client(tc.certs...), method, srv.URL+tc.path, tc.body)
			if got.code != tc.wantCode {
				t.Errorf("status code = %d, want %d; body: %s", got.code, tc.wantCode, got.body)
			}
			if tc.wantCode == http.StatusUnauthorized {
				checkJSONResponse(t, got, 401, statusJSON(401, metav1.StatusReasonUnauthorized, unauthorizedMessage))
			}
			var wantCallers []string
			if tc.wantCaller != "" {
				wantCallers = []string{tc.wantCaller}
			}
			if diff := cmp.Diff(wantCallers, srv.callers.names); diff != "" {
				t.Errorf("callers the review handlers saw (-want +got):\n%s", diff)
			}
		})
	}
}

// A keep-alive connection's certificate is verified once; the memo is keyed
// by the CA pool, so a rotated client CA verifies again.
func TestClientCertAuthRemembersAConnectionsVerification(t *testing.T) {
	ca := newTestCA(t, "deputy-client-ca")
	other := newTestCA(t, "someone-else")
	caPool := ca.pool()
	v := newSwitchableVerifier(caPool)
	srv := newClientAuthServer(t, v.VerifyOptions, []string{"kube-apiserver"}, false, false)
	cert := ca.client(t, "kube-apiserver")
	c := srv.client(cert)

	send := func(t *testing.T, c *http.Client, wantCode int, wantReused bool) int64 {
		t.Helper()
		before := v.calls.Load()
		got, reused := traced(t, c, http.MethodPost, srv.URL+"/authorize", sarV1Body)
		if got.code != wantCode {
			t.Errorf("status code = %d, want %d; body: %s", got.code, wantCode, got.body)
		}
		if reused != wantReused {
			t.Errorf("connection reused = %v, want %v", reused, wantReused)
		}
		return v.calls.Load() - before
	}

	var verifying, remembering int64
	t.Run("the first request of a connection verifies the certificate", func(t *testing.T) {
		verifying = send(t, c, 200, false)
	})
	t.Run("the second request of the connection uses the memo", func(t *testing.T) {
		remembering = send(t, c, 200, true)
		if remembering >= verifying {
			t.Errorf("the second request asked for verify options %d times, the first %d: want fewer (no chain verification)", remembering, verifying)
		}
	})
	t.Run("options that would fail verification do not matter while the CA pool is the same", func(t *testing.T) {
		v.set(caPool, x509.ExtKeyUsageServerAuth)
		if n := send(t, c, 200, true); n != remembering {
			t.Errorf("verify options asked %d times, want %d (memo)", n, remembering)
		}
	})
	t.Run("a new connection with those options verifies and fails", func(t *testing.T) {
		send(t, srv.client(cert), 401, false)
	})
	t.Run("a new CA pool without the client's CA verifies again and fails", func(t *testing.T) {
		v.set(other.pool(), x509.ExtKeyUsageClientAuth)
		if n := send(t, c, 401, true); n != verifying {
			t.Errorf("verify options asked %d times, want %d (a verification)", n, verifying)
		}
	})
	t.Run("a new CA pool with the client's CA verifies again and succeeds", func(t *testing.T) {
		v.set(ca.pool(), x509.ExtKeyUsageClientAuth)
		if n := send(t, c, 200, true); n != verifying {
			t.Errorf("verify options asked %d times, want %d (a verification)", n, verifying)
		}
		if n := send(t, c, 200, true); n != remembering {
			t.Errorf("verify options asked %d times, want %d (memo)", n, remembering)
		}
	})
	t.Run("a CA that goes away is noticed on the next request", func(t *testing.T) {
		v.ok.Store(false)
		send(t, c, 401, true)
		v.ok.Store(true)
	})
	t.Run("a failed verification is not remembered", func(t *testing.T) {
		bad := srv.client(other.client(t, "kube-apiserver"))
		for i := range 3 {
			if n := send(t, bad, 401, i > 0); n != verifying {
				t.Errorf("request %d asked for verify options %d times, want %d (a verification each time)", i+1, n, verifying)
			}
		}
	})
	t.Run("a name that is not allowed is not remembered", func(t *testing.T) {
		mallory := srv.client(ca.client(t, "mallory"))
		for i := range 3 {
			send(t, mallory, 401, i > 0)
		}
	})
}

// The memo ends with the client certificate: a keep-alive connection does not
// outlive its certificate.
func TestClientCertAuthMemoExpiresWithTheCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a certificate to expire")
	}
	ca := newTestCA(t, "deputy-client-ca")
	srv := newClientAuthServer(t, x509request.StaticVerifierFn(x509.VerifyOptions{Roots: ca.pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}),
		[]string{"kube-apiserver"}, false, false)
	// Certificates carry whole seconds.
	notAfter := time.Now().Add(2 * time.Second).Truncate(time.Second)
	c := srv.client(ca.issue(t, "kube-apiserver", notAfter, x509.ExtKeyUsageClientAuth))
	if got, _ := traced(t, c, http.MethodPost, srv.URL+"/authorize", sarV1Body); got.code != 200 {
		t.Fatalf("status code = %d before expiry, want 200; body: %s", got.code, got.body)
	}
	time.Sleep(time.Until(notAfter) + 1100*time.Millisecond)
	got, reused := traced(t, c, http.MethodPost, srv.URL+"/authorize", sarV1Body)
	if !reused {
		t.Fatal("the second request did not reuse the connection; the test proves nothing")
	}
	if got.code != http.StatusUnauthorized {
		t.Errorf("status code = %d after the certificate expired on a kept-alive connection, want 401", got.code)
	}
}

// Many concurrent streams of one HTTP/2 connection share the memo.
func TestClientCertAuthOverHTTP2(t *testing.T) {
	ca := newTestCA(t, "deputy-client-ca")
	v := newSwitchableVerifier(ca.pool())
	srv := newClientAuthServer(t, v.VerifyOptions, []string{"kube-apiserver"}, false, true)
	c := srv.client(ca.client(t, "kube-apiserver"))
	const n = 32
	codes := make([]int, n)
	protos := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/authorize", strings.NewReader(sarV1Body))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			codes[i], protos[i] = resp.StatusCode, resp.Proto
		})
	}
	wg.Wait()
	for i := range n {
		if codes[i] != 200 || protos[i] != "HTTP/2.0" {
			t.Errorf("request %d: %d over %s, want 200 over HTTP/2.0", i, codes[i], protos[i])
		}
	}
	// Every request asks for the options once; a verification asks twice.
	if calls := v.calls.Load(); calls >= 2*n {
		t.Errorf("verify options asked %d times for %d requests: the memo is not used across streams", calls, n)
	}
}

// The production CA source: a client CA file rewritten with another CA is
// noticed by kept-alive connections on their next request.
func TestClientCertAuthFollowsAClientCAFile(t *testing.T) {
	ca := newTestCA(t, "deputy-client-ca")
	next := newTestCA(t, "deputy-client-ca-2")
	file := filepath.Join(t.TempDir(), "client-ca.crt")
	writeCA := func(cas ...*testCA) {
		t.Helper()
		var b []byte
		for _, c := range cas {
			b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})...)
		}
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCA(ca)
	content, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", file)
	if err != nil {
		t.Fatal(err)
	}
	srv := newClientAuthServer(t, content.VerifyOptions, []string{"kube-apiserver"}, false, false)
	c := srv.client(ca.client(t, "kube-apiserver"))
	send := func(t *testing.T, wantCode int) {
		t.Helper()
		got, _ := traced(t, c, http.MethodPost, srv.URL+"/authorize", sarV1Body)
		if got.code != wantCode {
			t.Errorf("status code = %d, want %d; body: %s", got.code, wantCode, got.body)
		}
	}
	t.Run("a certificate of the CA in the file is answered", func(t *testing.T) { send(t, 200) })
	t.Run("a reload of an unchanged file keeps the memo and the answer", func(t *testing.T) {
		if err := content.RunOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		send(t, 200)
	})
	t.Run("after the file is rotated to another CA the same connection is unauthorized", func(t *testing.T) {
		writeCA(next)
		if err := content.RunOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		send(t, 401)
	})
	t.Run("a bundle of both CAs admits the connection again", func(t *testing.T) {
		writeCA(next, ca)
		if err := content.RunOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
		send(t, 200)
	})
}

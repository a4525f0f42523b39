package tokenreview_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/tokenreview"
)

// testIssuer is a local HTTPS OpenID provider: discovery document and JWKS,
// with keys that can be rotated.
type testIssuer struct {
	srv *httptest.Server

	mu   sync.Mutex
	keys map[string]*ecdsa.PrivateKey // kid -> key served in the JWKS
	// jwksFetches counts JWKS requests.
	jwksFetches atomic.Int64
}

func newTestIssuer(t testing.TB) *testIssuer {
	t.Helper()
	iss := &testIssuer{keys: map[string]*ecdsa.PrivateKey{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                iss.srv.URL,
			"jwks_uri":                              iss.srv.URL + "/keys",
			"authorization_endpoint":                iss.srv.URL + "/auth",
			"id_token_signing_alg_values_supported": []string{"ES256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		iss.jwksFetches.Add(1)
		iss.mu.Lock()
		var set jose.JSONWebKeySet
		for kid, k := range iss.keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: string(jose.ES256), Use: "sig"})
		}
		iss.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	})
	iss.srv = httptest.NewTLSServer(mux)
	t.Cleanup(iss.srv.Close)
	return iss
}

// URL is the issuer URL.
func (i *testIssuer) URL() string { return i.srv.URL }

// CAPEM is the PEM of the certificate the issuer serves with.
func (i *testIssuer) CAPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.srv.Certificate().Raw}))
}

// addKey generates a key, serves it under kid and returns it.
func (i *testIssuer) addKey(t testing.TB, kid string) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	i.mu.Lock()
	i.keys[kid] = k
	i.mu.Unlock()
	return k
}

// removeKey stops serving kid.
func (i *testIssuer) removeKey(kid string) {
	i.mu.Lock()
	delete(i.keys, kid)
	i.mu.Unlock()
}

// oidcClaims are the claims of a test ID token.
type oidcClaims struct {
	jwt.Claims
	Email  string   `json:"email,omitempty"`
	Groups []string `json:"groups,omitempty"`
}

// signOIDC signs claims with key under kid (ES256).
func signOIDC(t testing.TB, key *ecdsa.PrivateKey, kid string, c oidcClaims) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// idToken is a valid ID token of iss for aud, subject sub, now.
func idToken(t testing.TB, iss *testIssuer, key *ecdsa.PrivateKey, kid, aud, sub string, groups ...string) string {
	now := time.Now()
	return signOIDC(t, key, kid, oidcClaims{
		Claims: jwt.Claims{Issuer: iss.URL(), Subject: sub, Audience: jwt.Audience{aud},
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))},
		Groups: groups,
	})
}

// waitHealthy waits until every JWT authenticator of c has fetched its keys.
func waitHealthy(t testing.TB, c *tokenreview.Chains) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := c.HealthCheck()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JWT authenticators not initialized: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeFile writes data to dir/name and returns the path.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeCluster is kube-apiserver's TokenReview API: it authenticates the
// tokens in users (for any audiences, echoing the requested ones) and counts
// the reviews it answers.
type fakeCluster struct {
	srv     *httptest.Server
	mu      sync.Mutex
	users   map[string]authenticationv1.UserInfo
	reviews atomic.Int64
}

func newFakeCluster(t testing.TB, users map[string]authenticationv1.UserInfo) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{users: users}
	fc.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		fc.reviews.Add(1)
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fc.mu.Lock()
		u, ok := fc.users[tr.Spec.Token]
		fc.mu.Unlock()
		tr.Spec.Token = ""
		tr.Kind, tr.APIVersion = "TokenReview", "authentication.k8s.io/v1"
		if ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u, Audiences: tr.Spec.Audiences}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&tr)
	}))
	t.Cleanup(fc.srv.Close)
	return fc
}

// config is a client configuration for the fake cluster.
func (fc *fakeCluster) config() *rest.Config {
	return &rest.Config{
		Host:            fc.srv.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: fc.srv.Certificate().Raw})},
	}
}

// authenticate calls a with the audiences auds in the context (none: no
// audiences).
func authenticate(ctx context.Context, a authenticator.Token, token string, auds ...string) (*authenticator.Response, bool, error) {
	if len(auds) > 0 {
		ctx = authenticator.WithAudiences(ctx, auds)
	}
	return a.AuthenticateToken(ctx, token)
}

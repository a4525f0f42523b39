package tokenreview_test

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"fmt"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/utils/ptr"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/tokenreview"
)

// chainsConfig describes the chains a test builds.
type chainsConfig struct {
	keyFile        string
	verifyFiles    []string
	revocationFile string
	issuer         *testIssuer // OIDC issuer; nil: none
	oidcAudience   string
	tokenFile      string // static token file contents
	registry       *prometheus.Registry
	failureTTL     time.Duration
}

// Defaults of deputy's configuration (config.SetAuthenticationDefaults) that
// the chains of the tests use.
const (
	defaultProjectTokenIssuer = "deputy.dev/project-tokens"
	defaultDelegatedTTL       = 10 * time.Second
)

// mustChains builds the chains of cc; fc, if not nil, is the cluster of the
// delegated review (enabled then, as in cluster mode by default). The
// options are those deputy serve maps from a defaulted configuration.
func mustChains(t testing.TB, cc chainsConfig, fc *fakeCluster) *tokenreview.Chains {
	t.Helper()
	opts := tokenreview.Options{
		APIAudiences: apiAudiences,
		ProjectTokens: tokenreview.ProjectTokenFiles{Issuer: defaultProjectTokenIssuer, SigningKeyFile: cc.keyFile,
			VerificationKeyFiles: cc.verifyFiles, RevocationFile: cc.revocationFile},
		Delegated: tokenreview.Delegation{Enabled: fc != nil, CacheTTL: defaultDelegatedTTL,
			FailureCacheTTL: cmp.Or(cc.failureTTL, defaultDelegatedTTL), Timeout: defaultDelegatedTTL},
		ProjectRoles: testRoles,
	}
	if cc.issuer != nil {
		aud := cc.oidcAudience
		if aud == "" {
			aud = "deputy-cli"
		}
		opts.JWT = []tokenreview.JWTAuthenticator{{Config: apiserver.JWTAuthenticator{
			Issuer: apiserver.Issuer{URL: cc.issuer.URL(), Audiences: []string{aud}, CertificateAuthority: cc.issuer.CAPEM()},
			ClaimMappings: apiserver.ClaimMappings{
				Username: apiserver.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptr.To("oidc:")},
				Groups:   apiserver.PrefixedClaimOrExpression{Claim: "groups", Prefix: ptr.To("oidc:")},
			},
		}}}
	}
	if cc.registry != nil {
		opts.Registerer = cc.registry
	}
	if cc.tokenFile != "" {
		set := mustTokenSet(t, cc.tokenFile)
		opts.StaticTokens = func() *policy.TokenSet { return set }
	}
	if fc != nil {
		opts.ClusterConfig = fc.config()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	chains, err := tokenreview.NewChains(ctx, opts)
	if err != nil {
		t.Fatalf("NewChains() error = %v", err)
	}
	if cc.issuer != nil {
		waitHealthy(t, chains)
	}
	return chains
}

func TestChains(t *testing.T) {
	iss := newTestIssuer(t)
	oidcKey := iss.addKey(t, "kid-1")
	pk := newTestKey(t)
	dir := t.TempDir()
	keyFile := writeFile(t, dir, "key.pem", pk.privatePEM)
	sa := authenticationv1.UserInfo{Username: "system:serviceaccount:ci:deployer", UID: "sa-uid", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ci"}}
	fc := newFakeCluster(t, map[string]authenticationv1.UserInfo{
		"sa-token": sa,
		// A cluster authenticator mapping some token to a project identity.
		"impostor-token": {Username: "deputy:project:team-a/alpha:deployer"},
		// And one mapping a token into a project token's group.
		"group-impostor-token": {Username: "eve", Groups: []string{"dev", "deputy:project:team-a/alpha"}},
	})
	reg := prometheus.NewRegistry()
	chains := mustChains(t, chainsConfig{keyFile: keyFile, issuer: iss, registry: reg,
		tokenFile: "alice-token,alice,uid-alice,dev\nmallory-token,mallory,uid-mallory,\"dev,deputy:project:team-a/alpha\"\n"}, fc)

	project, _ := issue(t, pk, alphaDeployer(), time.Now())
	rotatedKey := iss.addKey(t, "kid-2")
	strangerKey := newTestKey(t).raw

	tests := []struct {
		name      string
		token     string
		audiences []string
		// per chain: the user name, "" for unauthenticated
		webhook, api string
		wantErr      string // substring of the error of both chains; "" none
		apiErr       string // substring of the API chain's error only
	}{
		{name: "a static token authenticates in both chains", token: "alice-token", webhook: "alice", api: "alice"},
		{name: "a project token authenticates in both chains", token: project, audiences: []string{"deputy"},
			webhook: "deputy:project:team-a/alpha:deployer", api: "deputy:project:team-a/alpha:deployer"},
		{name: "an OIDC token authenticates with the configured prefixes", token: idToken(t, iss, oidcKey, "kid-1", "deputy-cli", "carol", "dev"),
			webhook: "oidc:carol", api: "oidc:carol"},
		{name: "an OIDC token for another client ID is unauthenticated", token: idToken(t, iss, oidcKey, "kid-1", "another-client", "carol"),
			wantErr: "oidc: verify token"},
		{name: "an OIDC token signed with a key the issuer does not publish is unauthenticated",
			token: idToken(t, iss, strangerKey, "kid-1", "deputy-cli", "carol"), wantErr: "oidc: verify token"},
		{name: "an OIDC token signed with the issuer's rotated key authenticates (keys refetched)",
			token: idToken(t, iss, rotatedKey, "kid-2", "deputy-cli", "dave"), webhook: "oidc:dave", api: "oidc:dave"},
		{name: "an OIDC token whose iss escapes its slashes authenticates, as upstream", token: signRaw(t, oidcKey, "kid-1",
			fmt.Sprintf(`{"iss":"%s","sub":"frank","aud":"deputy-cli","iat":%d,"exp":%d}`, strings.ReplaceAll(iss.URL(), "/", `\/`), time.Now().Unix(), time.Now().Add(time.Hour).Unix())),
			webhook: "oidc:frank", api: "oidc:frank"},
		{name: "an expired OIDC token is unauthenticated", token: signOIDC(t, oidcKey, "kid-1", oidcClaims{Claims: jwtClaims(iss.URL(), "deputy-cli", "carol", -2*time.Hour)}),
			wantErr: "expired"},
		{name: "an OIDC token is valid only for the API audiences", token: idToken(t, iss, oidcKey, "kid-1", "deputy-cli", "carol"),
			audiences: []string{"vault"}},
		{name: "a ServiceAccount token authenticates only in the API chain, through the cluster", token: "sa-token", webhook: "", api: sa.Username},
		{name: "a cluster answer with deputy's project identity is refused", token: "impostor-token",
			apiErr: "which only deputy's project tokens may carry"},
		{name: "a cluster answer with a project token's group is refused", token: "group-impostor-token",
			apiErr: "which only deputy's project tokens may carry"},
		{name: "a static token with a project token's group is refused", token: "mallory-token",
			wantErr: "the token-file authenticator returned user \"mallory\" with deputy's project token identity"},
		{name: "an unknown token is unauthenticated everywhere", token: "nobody-token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				chain string
				want  string
				auth  func() (string, bool, error)
			}{
				{"webhook", tc.webhook, func() (string, bool, error) {
					return name(authenticate(t.Context(), chains.Webhook, tc.token, tc.audiences...))
				}},
				{"api", tc.api, func() (string, bool, error) {
					return name(authenticate(t.Context(), chains.API, tc.token, tc.audiences...))
				}},
			} {
				got, ok, err := c.auth()
				if ok != (c.want != "") || got != c.want {
					t.Errorf("%s chain: user %q authenticated=%t (err %v), want %q", c.chain, got, ok, err, c.want)
				}
				wantErr := tc.wantErr
				if c.chain == "api" && tc.apiErr != "" {
					wantErr = tc.apiErr
				}
				switch {
				case wantErr == "" && err != nil:
					t.Errorf("%s chain: error = %v, want none", c.chain, err)
				case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
					t.Errorf("%s chain: error = %v, want one containing %q", c.chain, err, wantErr)
				}
				if err != nil && strings.Contains(err.Error(), tc.token) {
					t.Errorf("%s chain: the error contains the token", c.chain)
				}
			}
		})
	}

	t.Run("the webhook chain never asks the cluster", func(t *testing.T) {
		before := fc.reviews.Load()
		for range 3 {
			if _, ok, _ := authenticate(t.Context(), chains.Webhook, "sa-token"); ok {
				t.Fatal("the webhook chain authenticated a ServiceAccount token")
			}
		}
		if n := fc.reviews.Load() - before; n != 0 {
			t.Errorf("the webhook chain sent %d TokenReviews to the cluster, want 0 (it would loop through kube-apiserver)", n)
		}
	})
	t.Run("delegated answers are cached, successes and failures", func(t *testing.T) {
		for _, tok := range []string{"sa-cached-token", "unknown-cached-token"} {
			if tok == "sa-cached-token" {
				fc.mu.Lock()
				fc.users[tok] = sa
				fc.mu.Unlock()
			}
			before := fc.reviews.Load()
			for range 5 {
				_, _, _ = authenticate(t.Context(), chains.API, tok, "deputy")
			}
			if n := fc.reviews.Load() - before; n != 1 {
				t.Errorf("%s: %d TokenReviews for 5 authentications, want 1", tok, n)
			}
		}
	})
	t.Run("metrics count each authenticator's results", func(t *testing.T) {
		for _, c := range []struct {
			chain, auth, result string
			min                 float64
		}{
			{"api", "delegated", "success", 2},
			{"api", "delegated-remote", "success", 2},
			{"webhook", "project", "success", 1},
			{"webhook", "token-file", "success", 1},
			{"webhook", "oidc:" + iss.URL(), "success", 2},
			{"webhook", "oidc:" + iss.URL(), "error", 2},
		} {
			v := metricValue(t, reg, "deputy_authentication_attempts_total", map[string]string{"chain": c.chain, "authenticator": c.auth, "result": c.result})
			if v < c.min {
				t.Errorf("attempts{chain=%s,authenticator=%s,result=%s} = %v, want >= %v", c.chain, c.auth, c.result, v, c.min)
			}
		}
	})
}

// name returns the user name of an authentication result.
func name(resp *authenticator.Response, ok bool, err error) (string, bool, error) {
	if resp == nil || resp.User == nil {
		return "", ok, err
	}
	return resp.User.GetName(), ok, err
}

// signRaw signs payload (JSON, verbatim) with key under kid (ES256).
func signRaw(t testing.TB, key *ecdsa.PrivateKey, kid, payload string) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// jwtClaims are the standard claims of an ID token of iss for aud and sub,
// issued at now+shift for an hour.
func jwtClaims(iss, aud, sub string, shift time.Duration) jwt.Claims {
	at := time.Now().Add(shift)
	return jwt.Claims{Issuer: iss, Subject: sub, Audience: jwt.Audience{aud},
		IssuedAt: jwt.NewNumericDate(at), NotBefore: jwt.NewNumericDate(at), Expiry: jwt.NewNumericDate(at.Add(time.Hour))}
}

// metricValue is the value of the counter or gauge series name{labels} in
// reg, 0 when absent.
func metricValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

package tokenreview_test

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"deputy.dev/deputy/tokenreview"
)

const testProjectIssuer = "deputy.dev/project-tokens"

// testKey is a project token signing key with its PEM encodings and the raw
// private key (to forge tokens the issuing API would refuse to make).
type testKey struct {
	key                   *tokenreview.SigningKey
	privatePEM, publicPEM []byte
	raw                   *ecdsa.PrivateKey
}

func newTestKey(t testing.TB) testKey {
	t.Helper()
	k, priv, pub, err := tokenreview.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(priv)
	raw, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{key: k, privatePEM: priv, publicPEM: pub, raw: raw.(*ecdsa.PrivateKey)}
}

// roles is a ProjectRoleLookup over a fixed set of "ns/name:role".
func roles(existing ...string) tokenreview.ProjectRoleLookup {
	return func(ns, name, role string) bool {
		return slices.Contains(existing, ns+"/"+name+":"+role)
	}
}

var testRoles = roles("team-a/alpha:deployer", "team-a/alpha:viewer", "team-a/alpha:admin")

func issue(t testing.TB, k testKey, req tokenreview.ProjectTokenRequest, now time.Time) (string, tokenreview.IssuedProjectToken) {
	t.Helper()
	if req.Issuer == "" {
		req.Issuer = testProjectIssuer
	}
	if req.TTL == 0 {
		req.TTL = time.Hour
	}
	if req.Audiences == nil {
		req.Audiences = apiAudiences
	}
	tok, info, err := tokenreview.IssueProjectToken(k.key, req, now)
	if err != nil {
		t.Fatalf("IssueProjectToken() error = %v", err)
	}
	return tok, info
}

// forge signs arbitrary claims with key under kid and alg.
func forge(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims ...any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	b := jwt.Signed(signer)
	for _, c := range claims {
		b = b.Claims(c)
	}
	tok, err := b.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func alphaDeployer() tokenreview.ProjectTokenRequest {
	return tokenreview.ProjectTokenRequest{Namespace: "team-a", Name: "alpha", Role: "deployer"}
}

func TestProjectTokenAuthenticator(t *testing.T) {
	current, previous, stranger := newTestKey(t), newTestKey(t), newTestKey(t)
	now := time.Now()

	valid, validInfo := issue(t, current, alphaDeployer(), now)
	fromPrevious, _ := issue(t, previous, alphaDeployer(), now)
	expired, _ := issue(t, current, alphaDeployer(), now.Add(-2*time.Hour))
	revoked, revokedInfo := issue(t, current, alphaDeployer(), now)
	otherAudience, _ := issue(t, current, tokenreview.ProjectTokenRequest{Namespace: "team-a", Name: "alpha", Role: "deployer", Audiences: []string{"vault"}}, now)
	unknownKid, _ := issue(t, stranger, alphaDeployer(), now)
	deletedRole, _ := issue(t, current, tokenreview.ProjectTokenRequest{Namespace: "team-a", Name: "alpha", Role: "deleted"}, now)
	deletedProject, _ := issue(t, current, tokenreview.ProjectTokenRequest{Namespace: "team-a", Name: "gone", Role: "deployer"}, now)
	future, _ := issue(t, current, alphaDeployer(), now.Add(10*time.Minute))
	otherIssuer, _ := issue(t, current, tokenreview.ProjectTokenRequest{Namespace: "team-a", Name: "alpha", Role: "deployer", Issuer: "someone-else"}, now)
	viewer, _ := issue(t, current, tokenreview.ProjectTokenRequest{Namespace: "team-a", Name: "alpha", Role: "viewer"}, now)

	// Tampering: the payload of another token under valid's signature.
	vp, dp := strings.Split(valid, "."), strings.Split(deletedRole, ".")
	tampered := vp[0] + "." + dp[1] + "." + vp[2]

	std := func(sub string, mod func(*jwt.Claims)) jwt.Claims {
		c := jwt.Claims{Issuer: testProjectIssuer, Subject: sub, Audience: jwt.Audience(apiAudiences), ID: "forged-id",
			IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	priv := map[string]any{"deputy.dev": map[string]string{"namespace": "team-a", "name": "alpha", "role": "deployer"}}
	goodSub := tokenreview.ProjectUserName("team-a", "alpha", "deployer")
	forgedOK := forge(t, jose.ES256, current.raw, current.key.KeyID(), std(goodSub, nil), priv)
	subMismatch := forge(t, jose.ES256, current.raw, current.key.KeyID(), std(tokenreview.ProjectUserName("team-b", "beta", "admin"), nil), priv)
	noExpiry := forge(t, jose.ES256, current.raw, current.key.KeyID(), std(goodSub, func(c *jwt.Claims) { c.Expiry = nil }), priv)
	noID := forge(t, jose.ES256, current.raw, current.key.KeyID(), std(goodSub, func(c *jwt.Claims) { c.ID = "" }), priv)
	tooLong := forge(t, jose.ES256, current.raw, current.key.KeyID(), std(goodSub, func(c *jwt.Claims) {
		c.Expiry = jwt.NewNumericDate(now.Add(tokenreview.MaxProjectTokenTTL + time.Hour))
	}), priv)
	noIssuedAt := forge(t, jose.ES256, current.raw, current.key.KeyID(), std(goodSub, func(c *jwt.Claims) { c.IssuedAt = nil }), priv)
	// Algorithm confusion: HMAC keyed with the public key's DER.
	pubDER, _ := x509.MarshalPKIXPublicKey(&current.raw.PublicKey)
	hmacForged := forge(t, jose.HS256, pubDER, current.key.KeyID(), std(goodSub, nil), priv)

	alphaUser := func(info tokenreview.IssuedProjectToken) *user.DefaultInfo {
		return &user.DefaultInfo{
			Name:   "deputy:project:team-a/alpha:deployer",
			Groups: []string{"deputy:project:team-a/alpha"},
			Extra: map[string][]string{
				"deputy.dev/project":                         {"team-a/alpha"},
				"deputy.dev/project-role":                    {"deployer"},
				"authentication.kubernetes.io/credential-id": {"JTI=" + info.ID},
			},
		}
	}

	tests := []struct {
		name       string
		keys       []testKey
		token      string
		audiences  []string // in the context; nil: none
		wantUser   *user.DefaultInfo
		wantAuds   []string
		wantReason string // "" when no rejection is expected
	}{
		{name: "a valid token authenticates as the project role with the project's group", keys: []testKey{current}, token: valid,
			audiences: []string{"deputy"}, wantUser: alphaUser(validInfo), wantAuds: []string{"deputy"}},
		{name: "without audiences in the context the API audiences are checked", keys: []testKey{current}, token: valid,
			wantUser: alphaUser(validInfo), wantAuds: apiAudiences},
		{name: "every role of a project carries the same project group", keys: []testKey{current}, token: viewer, wantUser: &user.DefaultInfo{
			Name: "deputy:project:team-a/alpha:viewer", Groups: []string{"deputy:project:team-a/alpha"}}, wantAuds: apiAudiences},
		{name: "an expired token is refused", keys: []testKey{current}, token: expired, wantReason: tokenreview.ProjectRejectExpired},
		{name: "a revoked token is refused", keys: []testKey{current}, token: revoked, wantReason: tokenreview.ProjectRejectRevoked},
		{name: "a token for other audiences is refused", keys: []testKey{current}, token: otherAudience, audiences: []string{"deputy"},
			wantReason: tokenreview.ProjectRejectAudience},
		{name: "a token is refused for audiences it was not issued for", keys: []testKey{current}, token: valid, audiences: []string{"vault"},
			wantReason: tokenreview.ProjectRejectAudience},
		{name: "a token signed by an unknown key is refused", keys: []testKey{current}, token: unknownKid, wantReason: tokenreview.ProjectRejectUnknownKey},
		{name: "during a rotation a token of the previous key still authenticates", keys: []testKey{current, previous}, token: fromPrevious,
			wantUser: &user.DefaultInfo{Name: "deputy:project:team-a/alpha:deployer"}, wantAuds: apiAudiences},
		{name: "after the rotation the previous key's tokens are refused", keys: []testKey{current}, token: fromPrevious,
			wantReason: tokenreview.ProjectRejectUnknownKey},
		{name: "a token of a deleted role is refused", keys: []testKey{current}, token: deletedRole, wantReason: tokenreview.ProjectRejectNoRole},
		{name: "a token of a deleted project is refused", keys: []testKey{current}, token: deletedProject, wantReason: tokenreview.ProjectRejectNoRole},
		{name: "a token issued in the future is refused", keys: []testKey{current}, token: future, wantReason: tokenreview.ProjectRejectNotYet},
		{name: "a tampered payload fails the signature", keys: []testKey{current}, token: tampered, wantReason: tokenreview.ProjectRejectSignature},
		{name: "a correctly signed token with consistent claims authenticates", keys: []testKey{current}, token: forgedOK,
			wantUser: &user.DefaultInfo{Name: goodSub}, wantAuds: apiAudiences},
		{name: "a subject that does not match the project claim is refused", keys: []testKey{current}, token: subMismatch,
			wantReason: tokenreview.ProjectRejectMalformed},
		{name: "a token without expiry is refused", keys: []testKey{current}, token: noExpiry, wantReason: tokenreview.ProjectRejectExpired},
		{name: "a token living longer than MaxProjectTokenTTL is refused", keys: []testKey{current}, token: tooLong,
			wantReason: tokenreview.ProjectRejectLifetime},
		{name: "a token without iat is refused", keys: []testKey{current}, token: noIssuedAt, wantReason: tokenreview.ProjectRejectLifetime},
		{name: "a token without jti is refused", keys: []testKey{current}, token: noID, wantReason: tokenreview.ProjectRejectMalformed},
		{name: "an HS256 token claiming deputy's issuer is refused", keys: []testKey{current}, token: hmacForged,
			wantReason: tokenreview.ProjectRejectMalformed},
		{name: "a token of another issuer is not deputy's and refused silently", keys: []testKey{current}, token: otherIssuer},
		{name: "a token that is not a JWT is refused silently", keys: []testKey{current}, token: "alice-token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var keys []*tokenreview.VerificationKey
			for _, k := range tc.keys {
				vk, err := tokenreview.ParseVerificationKey(k.publicPEM)
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, vk)
			}
			var reasons []string
			a, err := tokenreview.NewProjectTokenAuthenticator(tokenreview.ProjectTokenOptions{
				Issuer: testProjectIssuer, Keys: keys, Roles: testRoles, APIAudiences: apiAudiences,
				Revoked:  func(jti string) bool { return jti == revokedInfo.ID },
				Rejected: func(r string) { reasons = append(reasons, r) },
			})
			if err != nil {
				t.Fatal(err)
			}
			resp, ok, err := authenticate(t.Context(), a, tc.token, tc.audiences...)
			if err != nil {
				t.Fatalf("AuthenticateToken() error = %v, want none (a refused token is not a fault)", err)
			}
			if ok != (tc.wantUser != nil) {
				t.Fatalf("authenticated = %t, want %t (rejections %v)", ok, tc.wantUser != nil, reasons)
			}
			var wantReasons []string
			if tc.wantReason != "" {
				wantReasons = []string{tc.wantReason}
			}
			if diff := cmp.Diff(wantReasons, reasons); diff != "" {
				t.Errorf("rejection reasons (-want +got):\n%s", diff)
			}
			if !ok {
				return
			}
			got := resp.User
			if got.GetName() != tc.wantUser.Name {
				t.Errorf("user = %q, want %q", got.GetName(), tc.wantUser.Name)
			}
			if tc.wantUser.Groups != nil {
				if diff := cmp.Diff(tc.wantUser.Groups, got.GetGroups()); diff != "" {
					t.Errorf("groups (-want +got):\n%s", diff)
				}
			}
			if tc.wantUser.Extra != nil {
				if diff := cmp.Diff(tc.wantUser.Extra, got.GetExtra()); diff != "" {
					t.Errorf("extra (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tc.wantAuds, []string(resp.Audiences)); diff != "" {
				t.Errorf("audiences (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIssueProjectToken(t *testing.T) {
	k := newTestKey(t)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tok, info, err := tokenreview.IssueProjectToken(k.key, tokenreview.ProjectTokenRequest{
		Namespace: "team-a", Name: "alpha", Role: "deployer", TTL: 90 * time.Minute, Audiences: []string{"deputy"}, Issuer: testProjectIssuer,
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the token is an ES256 JWS naming its key by the public key's hash", func(t *testing.T) {
		parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatal(err)
		}
		der, _ := x509.MarshalPKIXPublicKey(&k.raw.PublicKey)
		sum := sha256.Sum256(der)
		wantKid := base64.RawURLEncoding.EncodeToString(sum[:])
		if got := parsed.Headers[0].KeyID; got != wantKid || info.KeyID != wantKid {
			t.Errorf("kid = %q (info %q), want %q", got, info.KeyID, wantKid)
		}
		var c jwt.Claims
		var p map[string]any
		if err := parsed.Claims(&k.raw.PublicKey, &c, &p); err != nil {
			t.Fatal(err)
		}
		if c.Issuer != testProjectIssuer || c.Subject != "deputy:project:team-a/alpha:deployer" || c.ID != info.ID || len(c.ID) < 22 {
			t.Errorf("claims = %+v, info %+v", c, info)
		}
		if !c.Expiry.Time().Equal(now.Add(90*time.Minute)) || !info.ExpiresAt.Equal(now.Add(90*time.Minute)) {
			t.Errorf("exp = %v (info %v), want %v", c.Expiry.Time(), info.ExpiresAt, now.Add(90*time.Minute))
		}
		if diff := cmp.Diff(jwt.Audience{"deputy"}, c.Audience); diff != "" {
			t.Errorf("aud (-want +got):\n%s", diff)
		}
		want := map[string]any{"namespace": "team-a", "name": "alpha", "role": "deployer"}
		if diff := cmp.Diff(want, p["deputy.dev"]); diff != "" {
			t.Errorf("deputy.dev claim (-want +got):\n%s", diff)
		}
	})
	t.Run("every token gets its own jti", func(t *testing.T) {
		_, other, err := tokenreview.IssueProjectToken(k.key, tokenreview.ProjectTokenRequest{
			Namespace: "team-a", Name: "alpha", Role: "deployer", TTL: time.Hour, Audiences: []string{"deputy"}, Issuer: testProjectIssuer,
		}, now)
		if err != nil {
			t.Fatal(err)
		}
		if other.ID == info.ID {
			t.Errorf("two tokens share jti %q", info.ID)
		}
	})
	t.Run("an invalid request names every problem", func(t *testing.T) {
		_, _, err := tokenreview.IssueProjectToken(k.key, tokenreview.ProjectTokenRequest{Namespace: "Team_A", Name: "", Role: " ", TTL: -time.Hour}, now)
		if err == nil {
			t.Fatal("IssueProjectToken() error = nil")
		}
		for _, want := range []string{"project namespace", "project name", "--role", "--ttl", "--audience", "issuer"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
	})
}

func TestKeys(t *testing.T) {
	k := newTestKey(t)
	t.Run("a private key file also serves as a verification key with the same kid", func(t *testing.T) {
		vk, err := tokenreview.ParseVerificationKey(k.privatePEM)
		if err != nil {
			t.Fatal(err)
		}
		if vk.KeyID() != k.key.KeyID() {
			t.Errorf("kid %q, want %q", vk.KeyID(), k.key.KeyID())
		}
	})
	t.Run("an EC PRIVATE KEY block is accepted", func(t *testing.T) {
		der, err := x509.MarshalECPrivateKey(k.raw)
		if err != nil {
			t.Fatal(err)
		}
		sk, err := tokenreview.ParseSigningKey(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
		if err != nil {
			t.Fatal(err)
		}
		if sk.KeyID() != k.key.KeyID() {
			t.Errorf("kid %q, want %q", sk.KeyID(), k.key.KeyID())
		}
	})
	t.Run("a public key is not a signing key", func(t *testing.T) {
		if _, err := tokenreview.ParseSigningKey(k.publicPEM); err == nil || !strings.Contains(err.Error(), "deputy token keygen") {
			t.Errorf("ParseSigningKey(public) error = %v, want one naming deputy token keygen", err)
		}
	})
	t.Run("a missing file names the field", func(t *testing.T) {
		if _, err := tokenreview.LoadVerificationKey("/nonexistent/key.pem"); err == nil || !strings.Contains(err.Error(), "verification key") {
			t.Errorf("LoadVerificationKey() error = %v", err)
		}
	})
}

// The project authenticator has the final word on tokens of its issuer: an
// expired project token must not reach the authenticators after it.
func TestProjectTokensAreFinalForTheirIssuer(t *testing.T) {
	k := newTestKey(t)
	dir := t.TempDir()
	keyFile := writeFile(t, dir, "key.pem", k.privatePEM)
	expired, _ := issue(t, k, alphaDeployer(), time.Now().Add(-2*time.Hour))
	fc := newFakeCluster(t, nil)
	chains := mustChains(t, chainsConfig{keyFile: keyFile}, fc)
	if _, ok, err := authenticate(t.Context(), chains.API, expired, "deputy"); ok || err != nil {
		t.Fatalf("expired project token: ok=%t err=%v, want unauthenticated without error", ok, err)
	}
	if n := fc.reviews.Load(); n != 0 {
		t.Errorf("the cluster was asked %d times about deputy's own expired token, want 0", n)
	}
	var _ authenticator.Token = chains.Project
}

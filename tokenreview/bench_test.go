package tokenreview_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"

	"deputy.dev/deputy/tokenreview"
)

// benchChains are the chains as deputy serves them in cluster mode: a token
// file, project tokens, one OIDC issuer, the delegated review (to a fake
// cluster that knows "sa-token" and the returned ServiceAccount JWT), metrics
// on.
func benchChains(b *testing.B) (c *tokenreview.Chains, iss *testIssuer, pk testKey, saJWT string) {
	b.Helper()
	iss = newTestIssuer(b)
	iss.addKey(b, "kid-1")
	pk = newTestKey(b)
	keyFile := writeFile(b, b.TempDir(), "key.pem", pk.privatePEM)
	// A ServiceAccount token is a JWT of kube-apiserver's issuer.
	saJWT = signOIDC(b, newTestKey(b).raw, "sa-kid", oidcClaims{Claims: jwtClaims(
		"https://kubernetes.default.svc.cluster.local", "https://kubernetes.default.svc.cluster.local", "system:serviceaccount:ci:deployer", 0)})
	sa := authenticationv1.UserInfo{Username: "system:serviceaccount:ci:deployer", Groups: []string{"system:serviceaccounts"}}
	fc := newFakeCluster(b, map[string]authenticationv1.UserInfo{"sa-token": sa, saJWT: sa})
	c = mustChains(b, chainsConfig{keyFile: keyFile, issuer: iss, registry: prometheus.NewRegistry(),
		tokenFile: "alice-token,alice,uid-alice,dev\n"}, fc)
	return c, iss, pk, saJWT
}

func reviewLoop(b *testing.B, r *tokenreview.Reviewer, token, wantUser string) {
	b.Helper()
	spec := authenticationv1.TokenReviewSpec{Token: token}
	ctx := b.Context()
	if st, err := r.Review(ctx, spec); err != nil || st.User.Username != wantUser {
		b.Fatalf("Review() = %+v, %v; want %s", st, err, wantUser)
	}
	b.ReportAllocs()
	for b.Loop() {
		st, err := r.Review(ctx, spec)
		if err != nil || !st.Authenticated {
			b.Fatalf("Review() = %+v, %v", st, err)
		}
	}
}

// BenchmarkCachedTokenReview: a ServiceAccount token answered from the
// delegated review's cache, through the whole API chain (token file miss,
// project token and OIDC issuer checks, cache hit), and the cache alone.
func BenchmarkCachedTokenReview(b *testing.B) {
	b.Run("api-chain/opaque-token", func(b *testing.B) {
		c, _, _, _ := benchChains(b)
		reviewLoop(b, tokenreview.NewReviewer(c.API, apiAudiences), "sa-token", "system:serviceaccount:ci:deployer")
	})
	b.Run("api-chain/serviceaccount-jwt", func(b *testing.B) {
		// The project and OIDC authenticators look at the JWT's payload (and
		// find it is not theirs) before the cache answers.
		c, _, _, saJWT := benchChains(b)
		reviewLoop(b, tokenreview.NewReviewer(c.API, apiAudiences), saJWT, "system:serviceaccount:ci:deployer")
	})
	b.Run("cache-only", func(b *testing.B) {
		a := cache.New(authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
			return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:ci:deployer"}, Audiences: apiAudiences}, true, nil
		}), false, 10*time.Second, 10*time.Second)
		reviewLoop(b, tokenreview.NewReviewer(a, apiAudiences), "sa-token", "system:serviceaccount:ci:deployer")
	})
}

// BenchmarkProjectTokenVerify: a project token through the webhook chain
// (ES256 verification, claims, revocation and role lookup), uncached.
func BenchmarkProjectTokenVerify(b *testing.B) {
	c, _, pk, _ := benchChains(b)
	tok, _ := issue(b, pk, alphaDeployer(), time.Now())
	reviewLoop(b, tokenreview.NewReviewer(c.Webhook, apiAudiences), tok, "deputy:project:team-a/alpha:deployer")
}

// BenchmarkOIDCVerify: an ES256 ID token through the webhook chain
// (k8s.io/apiserver's OIDC authenticator: signature, claims, CEL-free claim
// mappings), uncached.
func BenchmarkOIDCVerify(b *testing.B) {
	c, iss, _, _ := benchChains(b)
	iss.mu.Lock()
	key := iss.keys["kid-1"]
	iss.mu.Unlock()
	tok := idToken(b, iss, key, "kid-1", "deputy-cli", "carol", "dev")
	reviewLoop(b, tokenreview.NewReviewer(c.Webhook, apiAudiences), tok, "oidc:carol")
}

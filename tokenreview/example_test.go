package tokenreview_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/tokenreview"
)

func ExampleNewChain() {
	// A static token file: one plain token, one stored as its SHA-256
	// (the hash of "ci-token", from printf '%s' ci-token | sha256sum).
	const tokenFile = `alice-token,alice,1001,"dev,ops"
sha256:948b8c2427cd29047839b8e4a27a08763f8befbafa86be5cce8e46217d75e58a,ci,1002
`
	entries, err := policy.ParseTokenFile("tokens.csv", strings.NewReader(tokenFile))
	if err != nil {
		fmt.Println(err)
		return
	}
	set, err := policy.NewTokenSet(entries)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The policy source swaps the set on reload; the chain reads it per call.
	var current atomic.Pointer[policy.TokenSet]
	current.Store(set)

	apiAudiences := []string{"https://kubernetes.default.svc"}
	reviewer := tokenreview.NewReviewer(tokenreview.NewChain(apiAudiences, current.Load), apiAudiences)

	for _, spec := range []authenticationv1.TokenReviewSpec{
		{Token: "alice-token"},
		{Token: "ci-token"},
		{Token: "alice-token", Audiences: []string{"vault"}},
		{Token: "wrong-token"},
		{},
	} {
		status, err := reviewer.Review(context.Background(), spec)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Printf("authenticated=%t user=%q groups=%q audiences=%q\n",
			status.Authenticated, status.User.Username, status.User.Groups, status.Audiences)
	}
	// Output:
	// authenticated=true user="alice" groups=["dev" "ops"] audiences=["https://kubernetes.default.svc"]
	// authenticated=true user="ci" groups=[] audiences=["https://kubernetes.default.svc"]
	// authenticated=false user="" groups=[] audiences=[]
	// authenticated=false user="" groups=[] audiences=[]
	// error: token is required for TokenReview in authentication
}

func ExampleIssueProjectToken() {
	// deputy token keygen; in production the key comes from
	// authentication.projectTokens.signingKeyFile.
	key, _, _, err := tokenreview.GenerateSigningKey()
	if err != nil {
		fmt.Println(err)
		return
	}
	token, info, err := tokenreview.IssueProjectToken(key, tokenreview.ProjectTokenRequest{
		Namespace: "team-a", Name: "alpha", Role: "deployer", TTL: time.Hour,
		Audiences: []string{"https://kubernetes.default.svc.cluster.local"}, Issuer: "deputy.dev/project-tokens",
	}, time.Now())
	if err != nil {
		fmt.Println(err)
		return
	}
	verifier, err := tokenreview.NewProjectTokenAuthenticator(tokenreview.ProjectTokenOptions{
		Issuer:       "deputy.dev/project-tokens",
		Keys:         []*tokenreview.VerificationKey{key.Public()},
		APIAudiences: []string{"https://kubernetes.default.svc.cluster.local"},
		// Whether the role still exists, asked on every use (here: a fixed
		// project). The token's groups never come from the role.
		Roles: func(ns, name, role string) bool {
			return ns == "team-a" && name == "alpha" && role == "deployer"
		},
		Revoked: func(jti string) bool { return false },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, ok, _ := verifier.AuthenticateToken(context.Background(), token)
	fmt.Println(ok, resp.User.GetName(), resp.User.GetGroups(), info.UserName == resp.User.GetName())
	id, _ := tokenreview.ProjectOf(resp.User)
	fmt.Println(id)
	// Output:
	// true deputy:project:team-a/alpha:deployer [deputy:project:team-a/alpha] true
	// team-a/alpha
}

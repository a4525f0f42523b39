package webhook

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	kauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/config"
)

// newAPIAuthentication builds the authenticator of deputy's API from the
// configuration's api section: front-proxy request headers (their CA file
// reloaded on change), client certificates of the client CA, tokens of the
// API chain, anonymous when enabled.
//
// Errors: the request-header CA cannot be read (naming the field).
func newAPIAuthentication(ctx context.Context, c config.API, tokens authenticator.Token, clientCA x509request.VerifyOptionFunc) (authenticator.Request, *APIRequestHeader, error) {
	var rh *APIRequestHeader
	if c.RequestHeader != nil {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("requestheader-client-ca", c.RequestHeader.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to load the front proxy's CA %s (api.requestHeader.clientCAFile): %w", c.RequestHeader.ClientCAFile, err)
		}
		go ca.Run(ctx, 1)
		rh = &APIRequestHeader{
			VerifyOptions: ca.VerifyOptions, AllowedNames: c.RequestHeader.AllowedNames,
			UsernameHeaders: c.RequestHeader.UsernameHeaders, UIDHeaders: c.RequestHeader.UIDHeaders,
			GroupHeaders: c.RequestHeader.GroupHeaders, ExtraHeaderPrefixes: c.RequestHeader.ExtraHeaderPrefixes,
		}
	}
	return NewAPIAuthenticator(APIAuthenticationOptions{ClientCA: clientCA, RequestHeader: rh, Tokens: tokens, Anonymous: c.Anonymous}), rh, nil
}

// Delegated authorization caches the cluster's answers as aggregated API
// servers do (k8s.io/apiserver/pkg/server/options
// DelegatingAuthorizationOptions: 10s allowed, 10s denied).
const (
	delegatedAllowTTL = 10 * time.Second
	delegatedDenyTTL  = 10 * time.Second
)

// newDelegatedAuthorizer asks the cluster (SubjectAccessReviews with
// deputy's identity) through k8s.io/apiserver's delegating authorizer.
//
// Errors: no cluster connection (api.delegatedAuthorization needs cluster
// mode), or the client cannot be built.
func newDelegatedAuthorizer(restCfg *rest.Config) (kauthorizer.Authorizer, error) {
	if restCfg == nil {
		return nil, fmt.Errorf("api.delegatedAuthorization needs cluster mode (--kubeconfig or --in-cluster)")
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("failed to build the SubjectAccessReview client: %w", err)
	}
	return authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cs.AuthorizationV1(),
		AllowCacheTTL:             delegatedAllowTTL,
		DenyCacheTTL:              delegatedDenyTTL,
		// k8s.io/apiserver/pkg/server/options.DefaultAuthWebhookRetryBackoff,
		// copied: that package would pull a whole apiserver into deputy.
		WebhookRetryBackoff: &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5},
	}.New()
}

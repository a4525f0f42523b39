package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	kauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/webhook"
)

// apiParts are what deputy's API shares with the rest of the server.
type apiParts struct {
	// tokens is the token chain of the API (tokenreview.Chains.API).
	tokens authenticator.Token
	// clientCA verifies client certificates; nil without a client CA.
	clientCA x509request.VerifyOptionFunc
	// authz is the authorizer of /authorize.
	authz        kauthorizer.Authorizer
	applications apps.Applications
	// ready fails until deputy can answer (its policy has loaded).
	ready func() error
}

// newAPI builds deputy's own API: its callers authenticated by the API's
// token chain, client certificates of the client CA and the front proxy's
// request headers (api section), and authorized by the project scope of
// project tokens, the authorizer of /authorize and, with
// api.delegatedAuthorization (cluster mode), the cluster.
//
// Errors: the front proxy's CA cannot be read, delegated authorization
// without cluster mode, or the API's authorizer cannot be built.
func newAPI(ctx context.Context, cfg *config.DeputyConfiguration, mode *runMode, p apiParts, log *slog.Logger) (*webhook.APIHandler, error) {
	authn, requestHeader, err := newAPIAuthentication(ctx, cfg.API, p.tokens, p.clientCA)
	if err != nil {
		return nil, err
	}
	var delegated kauthorizer.Authorizer
	if cfg.API.DelegatedAuthorization {
		if delegated, err = newDelegatedAuthorizer(mode.restConfig); err != nil {
			return nil, err
		}
	}
	authz, err := webhook.NewAPIAuthorizer(webhook.NewProjectScopeAuthorizer(p.applications), p.authz, delegated)
	if err != nil {
		return nil, err
	}
	return webhook.NewAPIHandler(webhook.APIOptions{
		Authenticator:   authn,
		RequestHeader:   requestHeader,
		APIAudiences:    cfg.Authentication.APIAudiences,
		Authorizer:      authz,
		AggregatedGroup: cfg.API.AggregatedGroup,
		Ready:           p.ready,
		Applications:    p.applications,
		Log:             log,
	}), nil
}

// newAPIAuthentication builds the authenticator of deputy's API from the
// configuration's api section: front-proxy request headers (their CA file
// reloaded on change until ctx ends), client certificates of the client CA,
// tokens of the API chain, anonymous when enabled.
//
// Errors: the request-header CA cannot be read (naming the field).
func newAPIAuthentication(ctx context.Context, c config.API, tokens authenticator.Token, clientCA x509request.VerifyOptionFunc) (authenticator.Request, *webhook.APIRequestHeader, error) {
	var rh *webhook.APIRequestHeader
	if c.RequestHeader != nil {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("requestheader-client-ca", c.RequestHeader.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to load the front proxy's CA %s (api.requestHeader.clientCAFile): %w", c.RequestHeader.ClientCAFile, err)
		}
		go ca.Run(ctx, 1)
		rh = &webhook.APIRequestHeader{
			VerifyOptions: ca.VerifyOptions, AllowedNames: c.RequestHeader.AllowedNames,
			UsernameHeaders: c.RequestHeader.UsernameHeaders, UIDHeaders: c.RequestHeader.UIDHeaders,
			GroupHeaders: c.RequestHeader.GroupHeaders, ExtraHeaderPrefixes: c.RequestHeader.ExtraHeaderPrefixes,
		}
	}
	return webhook.NewAPIAuthenticator(webhook.APIAuthenticationOptions{ClientCA: clientCA, RequestHeader: rh, Tokens: tokens, Anonymous: c.Anonymous}), rh, nil
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
		return nil, errors.New("api.delegatedAuthorization needs cluster mode (--kubeconfig or --in-cluster)")
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

// newGitWebhook builds the Git push endpoint over deputy's Applications from
// sync.webhook (its secret files; its body limit, config's default when
// unset).
//
// Errors: a configured secret file cannot be read or is empty.
func newGitWebhook(w config.GitWebhook, applications apps.Applications, metrics *webhook.Metrics, log *slog.Logger) (*webhook.GitWebhookHandler, error) {
	return webhook.NewGitWebhookHandler(webhook.GitWebhookOptions{
		GitHubSecretFile: w.GitHubSecretFile, GitLabSecretFile: w.GitLabSecretFile, TokenFile: w.TokenFile,
		MaxPayloadBytes: cmp.Or(w.MaxPayloadBytes, config.DefaultWebhookMaxPayload),
		Applications:    applications.List, Trigger: applications.Trigger, Log: log, Metrics: metrics})
}

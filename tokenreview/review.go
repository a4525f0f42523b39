package tokenreview

import (
	"context"
	"errors"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/token/union"

	"deputy.dev/deputy/policy"
)

// ErrTokenRequired is returned by Reviewer.Review for a spec without a token.
// The HTTP layer answers it with 400 Bad Request, as kube-apiserver's
// TokenReview REST storage does (k8s.io/kubernetes
// pkg/registry/authentication/tokenreview/storage.go, same message).
var ErrTokenRequired = errors.New("token is required for TokenReview in authentication")

// ErrInvalidAudiences is returned by Reviewer.Review when an authenticator in
// the chain answered for audiences disjoint from the ones under review (an
// authenticator that is not audience-aware and was not wrapped with
// authenticator.WrapAudienceAgnosticToken). It is a fault of deputy, not of the
// request: kube-apiserver's TokenReview REST storage answers it with 500
// Internal Server Error and the same message.
var ErrInvalidAudiences = errors.New("error validating audiences")

// errNoUser is reported in status.error when an authenticator claims success
// without a user; Review fails closed.
var errNoUser = errors.New("authenticator reported success without a user")

// tokenFileAuthenticator authenticates static tokens against the TokenSet that
// current returns at the time of the call.
type tokenFileAuthenticator struct {
	current func() *policy.TokenSet
}

// NewTokenFileAuthenticator returns an authenticator.Token for static token
// files, the counterpart of upstream
// k8s.io/apiserver/pkg/authentication/token/tokenfile.TokenAuthenticator. It
// calls current on every request, so a policy reload that swaps the set takes
// effect on the next call; current may be nil or return nil (no tokens).
//
// A known token yields the entry's user (name, uid, groups; no extra and no
// audiences: the authenticator is audience-agnostic, so wrap it with
// authenticator.WrapAudienceAgnosticToken, as NewChain does). An unknown token
// yields (nil, false, nil); the authenticator never returns an error.
func NewTokenFileAuthenticator(current func() *policy.TokenSet) authenticator.Token {
	return &tokenFileAuthenticator{current: current}
}

// AuthenticateToken implements authenticator.Token.
func (a *tokenFileAuthenticator) AuthenticateToken(_ context.Context, token string) (*authenticator.Response, bool, error) {
	if a.current == nil {
		return nil, false, nil
	}
	u, ok := a.current().Lookup(token)
	if !ok {
		return nil, false, nil
	}
	return &authenticator.Response{User: u}, true, nil
}

// NewChain composes deputy's token authenticator chain the way kube-apiserver
// does (k8s.io/kubernetes pkg/kubeapiserver/authenticator/config.go): the static
// token file authenticator over fileSet, wrapped with
// authenticator.WrapAudienceAgnosticToken(apiAudiences, ...) so its tokens are
// valid only for the API audiences, first; then the extra authenticators in
// order (nil ones are skipped), all in a k8s.io/apiserver token union.New: the
// first success wins, and errors are aggregated only when none succeeds.
//
// Extra authenticators must be audience-aware (return the audiences they
// validated, as the OIDC/JWT and delegated TokenReview authenticators do) or be
// wrapped with WrapAudienceAgnosticToken by the caller; they must not put the
// token into their errors, because errors become status.error.
func NewChain(apiAudiences []string, fileSet func() *policy.TokenSet, extra ...authenticator.Token) authenticator.Token {
	chain := []authenticator.Token{
		authenticator.WrapAudienceAgnosticToken(slices.Clone(apiAudiences), NewTokenFileAuthenticator(fileSet)),
	}
	for _, a := range extra {
		if a != nil {
			chain = append(chain, a)
		}
	}
	return union.New(chain...)
}

// Reviewer answers TokenReviews with an authenticator chain (see NewChain).
// It is immutable and safe for concurrent use.
type Reviewer struct {
	auth         authenticator.Token
	apiAudiences authenticator.Audiences
}

// NewReviewer returns a Reviewer that authenticates with auth, normally the
// result of NewChain, and uses apiAudiences (kube-apiserver's --api-audiences)
// for reviews that name no audiences. A nil auth authenticates nobody.
func NewReviewer(auth authenticator.Token, apiAudiences []string) *Reviewer {
	return &Reviewer{auth: auth, apiAudiences: slices.Clone(apiAudiences)}
}

// Review answers a TokenReview with the semantics of kube-apiserver's
// TokenReview REST storage (k8s.io/kubernetes
// pkg/registry/authentication/tokenreview/storage.go, Create):
//
//   - an empty spec.token returns ErrTokenRequired (400 upstream);
//   - the audiences under review are spec.audiences, or the configured API
//     audiences when the request names none; when there are any they are put
//     into the authenticators' context with authenticator.WithAudiences, and
//     audiences that ctx already carries are never used;
//   - status.authenticated is the chain's answer; an authenticator error (a real
//     fault) becomes status.error, which makes kube-apiserver treat the call as
//     an error and not cache it;
//   - a response whose audiences are disjoint from the ones under review
//     returns ErrInvalidAudiences (500 upstream);
//   - with a user, status.user carries username, uid, groups and extra (a
//     non-nil map, as upstream) and status.audiences the response's audiences,
//     restricted to the ones under review when there are any.
//
// Differences from upstream, on purpose: an unknown token is
// authenticated:false with no status.error (upstream's bearer-token wrapper
// reports "invalid bearer token", which a webhook must not, or the apiserver
// would never cache the failure); the token is passed to the chain verbatim
// (upstream goes through an Authorization header, which cuts a token at its
// first space); a success without a user is refused with status.error; and ctx
// reaches the authenticators (deadline, cancellation, values other than
// audiences). Review never logs and never puts the token into its result.
func (r *Reviewer) Review(ctx context.Context, spec authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
	var status authenticationv1.TokenReviewStatus
	if len(spec.Token) == 0 {
		return status, ErrTokenRequired
	}
	if r == nil || r.auth == nil {
		return status, nil
	}

	auds := authenticator.Audiences(spec.Audiences)
	if len(auds) == 0 {
		auds = r.apiAudiences
	}
	ctx = reviewContext{ctx}
	if len(auds) > 0 {
		ctx = authenticator.WithAudiences(ctx, auds)
	}

	resp, ok, err := r.auth.AuthenticateToken(ctx, spec.Token)
	if ok && (resp == nil || resp.User == nil) {
		return authenticationv1.TokenReviewStatus{Error: errNoUser.Error()}, nil
	}
	status.Authenticated = ok
	if err != nil {
		status.Error = err.Error()
	}
	if len(auds) > 0 && resp != nil && len(auds.Intersect(resp.Audiences)) == 0 {
		return authenticationv1.TokenReviewStatus{}, ErrInvalidAudiences
	}
	if resp != nil && resp.User != nil {
		status.User = authenticationv1.UserInfo{
			Username: resp.User.GetName(),
			UID:      resp.User.GetUID(),
			Groups:   resp.User.GetGroups(),
			Extra:    map[string]authenticationv1.ExtraValue{},
		}
		for k, v := range resp.User.GetExtra() {
			status.User.Extra[k] = authenticationv1.ExtraValue(v)
		}
		if len(auds) > 0 {
			status.Audiences = auds.Intersect(resp.Audiences)
		} else {
			status.Audiences = resp.Audiences
		}
	}
	return status, nil
}

// reviewContext hides audiences that the caller's context may carry, so that
// only the audiences Review decides on reach the authenticators (upstream
// authenticates on a fresh context). Everything else passes through.
type reviewContext struct {
	context.Context
}

// Value implements context.Context.
func (c reviewContext) Value(key any) any {
	v := c.Context.Value(key)
	if _, isAudiences := v.(authenticator.Audiences); isAudiences {
		return nil
	}
	return v
}

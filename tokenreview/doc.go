// Package tokenreview owns deputy's token authenticator chains and the
// Reviewer that turns a TokenReviewSpec into a TokenReviewStatus with
// kube-apiserver's semantics.
//
// NewChains assembles, from k8s.io/apiserver pieces and plain Options, the
// two chains deputy serves with: the webhook chain for /authenticate (static
// token file, deputy's project tokens, OIDC/JWT authenticators) and the API
// chain for deputy's own API (the webhook chain plus a cached, delegated
// TokenReview to the cluster — never used for /authenticate, where it would
// loop through kube-apiserver back into deputy). It also owns project tokens
// themselves: ES256 JWTs issued by IssueProjectToken (`deputy token create`),
// verified by ProjectTokenAuthenticator against rotating keys, a revocation
// list and the AppProject role that must still exist; and ProjectOf /
// CheckProjectScope, which keep a project token to its own project's
// Applications.
//
// The package measures each authenticator (prometheus, through the registerer
// it is given) and logs nothing itself: background events (revocation list
// reloads) go to the caller's callback. HTTP belongs to the webhook package;
// the mapping from deputy's configuration file to Options belongs to the
// composition root: the package must not import config. It must never log,
// store or echo a raw token: tokens are only hashed (static tokens, cache
// keys) or parsed and verified; refusals carry reasons, never token material.
package tokenreview

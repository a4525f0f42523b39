// Package tokenreview owns deputy's TokenReview authenticator chain: the
// static token file authenticator (reading the current policy.TokenSet on
// every call), the composition of it with further authenticators (OIDC,
// delegated TokenReview) and the Reviewer that turns a TokenReviewSpec into a
// TokenReviewStatus with kube-apiserver's semantics. The same chain
// authenticates callers of deputy's own API.
//
// The package returns data only: HTTP, metrics and logging belong to the
// webhook package. It must not log at all, and must never log, store or echo a
// raw token: tokens are only hashed and compared.
package tokenreview

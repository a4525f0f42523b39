// Package webhook is deputy's HTTPS front: the server (TLS with certificate hot
// reload, client-certificate authentication, graceful shutdown), routing, the
// three review endpoints (/authorize SubjectAccessReview, /authenticate
// TokenReview, /validate AdmissionReview), deputy's own API under
// /apis/deputy.dev/v1alpha1 (sync trigger, Application status, progress
// watch; callers authenticated by k8s.io/apiserver's token and x509
// authenticators and authorized by deputy's authorizer) and its client,
// health, readiness and metrics.
//
// All review endpoints share one hardened transport: POST only, body limits
// as named constants (413), application/json only (415), decoding of the
// request's version (v1 and v1beta1) and an answer in the same version, never a
// 500 for bad input, never a panic while writing. Review bodies are never
// logged: they carry tokens and objects.
//
// The package must not evaluate policy itself; it calls authorizer,
// tokenreview and the admission handlers.
package webhook

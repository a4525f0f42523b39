// Package webhook is deputy's HTTPS front: the server (TLS with certificate hot
// reload, client-certificate authentication, graceful shutdown), routing, the
// three review endpoints (/authorize SubjectAccessReview, /authenticate
// TokenReview, /validate AdmissionReview), health, readiness and metrics.
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

// Package webhook is what deputy serves over HTTPS: the server (TLS with
// certificate hot reload, client-certificate authentication, graceful
// shutdown), routing, the three review endpoints (/authorize
// SubjectAccessReview, /authenticate TokenReview, /validate AdmissionReview
// with the AppProject and RBAC admission handlers), deputy's own API under
// /apis/deputy.dev/v1alpha1 (sync trigger, Application status, progress
// watch; callers authenticated by k8s.io/apiserver's token and x509
// authenticators and authorized by deputy's authorizer, behind
// kube-apiserver's handler chain), the Git push endpoint /api/webhook (each
// sender's authentication, its secret files, payload parsing), health,
// readiness and metrics.
//
// All review endpoints share one hardened transport and one decoding
// prologue (decodeReview): POST only, body limits as named constants (413),
// application/json only (415), one case-sensitive decode of the request's
// version (v1 and v1beta1) and an answer in the same version, never a 500 for
// bad input, never a panic while writing. Every error answer is a
// metav1.Status written from one type (statusError), in kube-apiserver's two
// shapes: code, reason and message, or with the details of
// k8s.io/apimachinery's api errors. Logging is log/slog with constant
// messages and the request ID; review bodies, tokens, secrets and signatures
// are never logged.
//
// Metrics: deputy_decisions_total counts /authorize's decisions by the
// authorizer that decided and the impersonation shape (both bounded, from
// package authorizer); its sub-package decisionlog writes the decision logs
// (logging.decisions) off the request goroutine, from authorization
// attributes only.
//
// Deputy's API and the Git push endpoint reach Applications only through
// package apps' contract (apps.Applications: find, AppProject, start, diff,
// status, watch; apps.SyncPush for a push), whichever the run mode.
//
// Its constructors take plain options (server, handlers, API, Git push
// endpoint); package serve, the composition root of `deputy serve`, maps
// deputy's configuration onto them and wires the components together.
//
// The package must not evaluate policy itself (it calls authorizer,
// tokenreview and the admission handlers), know the run mode, hold
// sync-domain rules, or read deputy's configuration (package config).
package webhook

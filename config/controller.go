package config

import (
	"time"

	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// LeaderElection configures client-go leader election on a
// coordination.k8s.io/v1 Lease (k8s.io/client-go/tools/leaderelection). The
// durations have client-go's (and kube-controller-manager's) meaning and
// defaults: a leader that has not renewed for LeaseDuration is replaced.
type LeaderElection struct {
	// LeaseNamespace holds the Lease. Default: the Pod's namespace (the
	// POD_NAMESPACE environment variable, or the in-cluster ServiceAccount's
	// namespace file), else deputy-system.
	LeaseNamespace string `json:"leaseNamespace,omitempty"`
	// LeaseName is the Lease's name. Default deputy-sync.
	LeaseName string `json:"leaseName,omitempty"`
	// LeaseDuration: how long non-leaders wait before taking over an
	// unrenewed Lease. Default 15s.
	LeaseDuration metav1.Duration `json:"leaseDuration,omitempty"`
	// RenewDeadline: how long the leader retries renewing before it gives
	// up leadership. Default 10s; must be below leaseDuration.
	RenewDeadline metav1.Duration `json:"renewDeadline,omitempty"`
	// RetryPeriod: the wait between attempts. Default 2s; must be below
	// renewDeadline.
	RetryPeriod metav1.Duration `json:"retryPeriod,omitempty"`
	// Identity names this replica in the Lease. Default: the host name
	// (the Pod name) and a random suffix.
	Identity string `json:"identity,omitempty"`
}

// GitWebhook configures POST /api/webhook, where Git servers announce pushes.
// Each provider is accepted only when its secret is configured (fail
// closed): an unsigned or wrongly signed request gets 401.
type GitWebhook struct {
	// GitHubSecretFile holds the secret GitHub signs payloads with
	// (X-Hub-Signature-256, HMAC-SHA256).
	GitHubSecretFile string `json:"githubSecretFile,omitempty"`
	// GitLabSecretFile holds the secret token GitLab sends in X-Gitlab-Token.
	GitLabSecretFile string `json:"gitlabSecretFile,omitempty"`
	// TokenFile holds the token of the plain form (any other sender):
	// application/x-www-form-urlencoded repoURL and revision, with the token
	// in the X-Deputy-Webhook-Token header.
	TokenFile string `json:"tokenFile,omitempty"`
	// MaxPayloadBytes bounds a request body. Default 25 MiB, GitHub's own cap
	// on webhook payloads.
	MaxPayloadBytes int64 `json:"maxPayloadBytes,omitempty"`
}

// Defaults of cluster-mode operation.
const (
	DefaultReconcilePeriod      = 3 * time.Minute
	DefaultLeaseName            = "deputy-sync"
	DefaultLeaseNamespace       = "deputy-system"
	DefaultLeaseDuration        = 15 * time.Second
	DefaultRenewDeadline        = 10 * time.Second
	DefaultRetryPeriod          = 2 * time.Second
	DefaultWebhookMaxPayload    = 25 << 20
	minReconcilePeriod          = 10 * time.Second
	maxWebhookMaxPayloadBytes   = 100 << 20
	minimumLeaderElectionPeriod = 100 * time.Millisecond
)

// SetControllerDefaults fills the defaults of reconcilePeriod, leaderElection
// (except leaseNamespace and identity, resolved at start from the Pod) and
// webhook.maxPayloadBytes.
func SetControllerDefaults(s *Sync) {
	if s.ReconcilePeriod.Duration == 0 {
		s.ReconcilePeriod.Duration = DefaultReconcilePeriod
	}
	le := &s.LeaderElection
	if le.LeaseName == "" {
		le.LeaseName = DefaultLeaseName
	}
	if le.LeaseDuration.Duration == 0 {
		le.LeaseDuration.Duration = DefaultLeaseDuration
	}
	if le.RenewDeadline.Duration == 0 {
		le.RenewDeadline.Duration = DefaultRenewDeadline
	}
	if le.RetryPeriod.Duration == 0 {
		le.RetryPeriod.Duration = DefaultRetryPeriod
	}
	if s.Webhook.MaxPayloadBytes == 0 {
		s.Webhook.MaxPayloadBytes = DefaultWebhookMaxPayload
	}
}

func validateController(s *Sync, _ Cluster, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.ReconcilePeriod.Duration < minReconcilePeriod {
		errs = append(errs, field.Invalid(fld.Child("reconcilePeriod"), s.ReconcilePeriod.Duration.String(), "must be at least 10s, e.g. 3m"))
	}
	for i, ns := range s.ApplicationNamespaces {
		for _, msg := range validation.ValidateNamespaceName(ns, false) {
			errs = append(errs, field.Invalid(fld.Child("applicationNamespaces").Index(i), ns, msg))
		}
	}
	le, lf := s.LeaderElection, fld.Child("leaderElection")
	if le.LeaseNamespace != "" {
		for _, msg := range validation.ValidateNamespaceName(le.LeaseNamespace, false) {
			errs = append(errs, field.Invalid(lf.Child("leaseNamespace"), le.LeaseNamespace, msg))
		}
	}
	for _, msg := range validation.NameIsDNSSubdomain(le.LeaseName, false) {
		errs = append(errs, field.Invalid(lf.Child("leaseName"), le.LeaseName, msg))
	}
	// client-go's leaderelection.NewLeaderElector requires
	// leaseDuration > renewDeadline > jitter*retryPeriod (jitter 1.2).
	if le.RetryPeriod.Duration < minimumLeaderElectionPeriod {
		errs = append(errs, field.Invalid(lf.Child("retryPeriod"), le.RetryPeriod.Duration.String(), "must be at least 100ms, e.g. 2s"))
	}
	if le.RenewDeadline.Duration <= time.Duration(1.2*float64(le.RetryPeriod.Duration)) {
		errs = append(errs, field.Invalid(lf.Child("renewDeadline"), le.RenewDeadline.Duration.String(), "must be more than 1.2 × retryPeriod, e.g. 10s with retryPeriod 2s"))
	}
	if le.LeaseDuration.Duration <= le.RenewDeadline.Duration {
		errs = append(errs, field.Invalid(lf.Child("leaseDuration"), le.LeaseDuration.Duration.String(), "must be more than renewDeadline, e.g. 15s with renewDeadline 10s"))
	}
	if s.Webhook.MaxPayloadBytes < 1024 || s.Webhook.MaxPayloadBytes > maxWebhookMaxPayloadBytes {
		errs = append(errs, field.Invalid(fld.Child("webhook", "maxPayloadBytes"), s.Webhook.MaxPayloadBytes, "must be between 1024 and 104857600 (100 MiB)"))
	}
	return errs
}

package config

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Authentication configures TokenReview answers.
type Authentication struct {
	// APIAudiences are the audiences static tokens are valid for; a
	// TokenReview without spec.audiences is checked against these, one with
	// audiences must intersect them. kube-apiserver sends its --api-audiences
	// (by default its --service-account-issuer). Default:
	// [https://kubernetes.default.svc.cluster.local].
	APIAudiences []string `json:"apiAudiences,omitempty"`
}

// SetAuthenticationDefaults fills the authentication defaults: the API
// audience https://kubernetes.default.svc.cluster.local.
func SetAuthenticationDefaults(a *Authentication) {
	if len(a.APIAudiences) == 0 {
		a.APIAudiences = []string{DefaultAPIAudience}
	}
}

// validateAuthentication checks the authentication section; cluster is
// deputy's cluster connection (delegated reviews need one).
func validateAuthentication(a *Authentication, _ Cluster, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, aud := range a.APIAudiences {
		if strings.TrimSpace(aud) == "" {
			errs = append(errs, field.Invalid(fld.Child("apiAudiences").Index(i), aud, "must not be empty"))
		}
	}
	return errs
}

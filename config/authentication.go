package config

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	apiservervalidation "k8s.io/apiserver/pkg/apis/apiserver/validation"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
)

// Authentication configures who deputy recognises: in TokenReviews
// (/authenticate, called by kube-apiserver) and on deputy's own API.
//
// Two token chains are built from it (see package tokenreview):
//   - the webhook chain answers /authenticate: the static token file, deputy's
//     project tokens, then the JWT (OIDC) authenticators;
//   - the API chain authenticates callers of deputy's own API: the webhook
//     chain, then (cluster mode) a delegated TokenReview to the cluster, for
//     ServiceAccount tokens and whatever else kube-apiserver accepts. The
//     delegated review is never part of the webhook chain: kube-apiserver's
//     TokenReview runs its whole authenticator chain, deputy's webhook
//     included, so delegating from /authenticate would loop.
type Authentication struct {
	// APIAudiences are the audiences static tokens are valid for; a
	// TokenReview without spec.audiences is checked against these, one with
	// audiences must intersect them. kube-apiserver sends its --api-audiences
	// (by default its --service-account-issuer). Default:
	// [https://kubernetes.default.svc.cluster.local].
	APIAudiences []string `json:"apiAudiences,omitempty"`
	// JWT are OIDC / JWT authenticators with exactly the semantics of the
	// jwt list of kube-apiserver's --authentication-config file
	// (apiserver.config.k8s.io/v1 AuthenticationConfiguration): issuer (url,
	// discoveryURL, certificateAuthority, audiences, audienceMatchPolicy),
	// claimValidationRules, claimMappings (username, groups, uid, extra, with
	// claims, prefixes or CEL expressions) and userValidationRules; plus
	// deputy's certificateAuthorityFile.
	JWT []JWTAuthenticator `json:"jwt,omitempty"`
	// ProjectTokens configures deputy's project tokens (`deputy token create`).
	ProjectTokens ProjectTokens `json:"projectTokens,omitempty"`
	// Delegated configures the delegated TokenReview of deputy's API (cluster
	// mode only).
	Delegated DelegatedAuthentication `json:"delegated,omitempty"`
}

// JWTAuthenticator is one entry of kube-apiserver's AuthenticationConfiguration
// jwt list, verbatim (same fields, same validation, same behaviour: deputy
// runs k8s.io/apiserver's OIDC authenticator with it), plus
// CertificateAuthorityFile.
type JWTAuthenticator struct {
	apiserverv1.JWTAuthenticator `json:",inline"`
	// CertificateAuthorityFile is a PEM file of the CAs that sign the issuer's
	// (and discovery URL's) serving certificate, the alternative to
	// issuer.certificateAuthority (kube-apiserver's --oidc-ca-file). It is read
	// at start. Neither set: the host's root CAs.
	CertificateAuthorityFile string `json:"certificateAuthorityFile,omitempty"`
}

// Internal converts the authenticator to k8s.io/apiserver's internal type, the
// one its OIDC authenticator and validation take. certificateAuthorityFile is
// not read: the caller puts its content into Issuer.CertificateAuthority.
func (j *JWTAuthenticator) Internal() (apiserver.JWTAuthenticator, error) {
	var out apiserver.JWTAuthenticator
	err := apiserverv1.Convert_v1_JWTAuthenticator_To_apiserver_JWTAuthenticator(&j.JWTAuthenticator, &out, nil)
	return out, err
}

// ProjectTokens configures deputy's project tokens: ES256 JWTs that deputy
// signs for a role of a deputy.dev AppProject (`deputy token create --project
// NAMESPACE/NAME --role R --ttl D`), user deputy:project:NAMESPACE/NAME:R with
// the single group deputy:project:NAMESPACE/NAME (never the role's groups).
// They are enabled when a signing key or a verification key is configured.
type ProjectTokens struct {
	// Issuer is the tokens' iss claim. Default deputy.dev/project-tokens. No
	// jwt authenticator may use it.
	Issuer string `json:"issuer,omitempty"`
	// SigningKeyFile is the PEM EC P-256 private key that signs new tokens
	// (`deputy token keygen` writes one). Its public key verifies tokens too.
	// The server only needs it to verify; `deputy token create` needs it to
	// sign.
	SigningKeyFile string `json:"signingKeyFile,omitempty"`
	// VerificationKeyFiles are further PEM public keys (or private keys, whose
	// public half is used) whose tokens are accepted: the previous signing
	// keys during a rotation. A token names its key by kid, the SHA-256 of the
	// public key. Keys are read at start.
	VerificationKeyFiles []string `json:"verificationKeyFiles,omitempty"`
	// RevocationFile lists revoked tokens by their jti, one per line ('#'
	// starts a comment). It is re-read within a second of a change; a token
	// it lists is unauthenticated.
	RevocationFile string `json:"revocationFile,omitempty"`
}

// Enabled reports whether project tokens are accepted.
func (p *ProjectTokens) Enabled() bool {
	return p.SigningKeyFile != "" || len(p.VerificationKeyFiles) > 0
}

// DelegatedAuthentication configures the TokenReview that deputy's API sends
// to the cluster for tokens deputy does not know itself (ServiceAccount
// tokens, and anything else kube-apiserver authenticates). Never used for
// /authenticate.
type DelegatedAuthentication struct {
	// Enabled turns the delegated review on; default: on in cluster mode
	// (cluster.kubeconfig or cluster.inCluster), which it requires.
	Enabled *bool `json:"enabled,omitempty"`
	// CacheTTL is how long a successful review is reused. Default 10s, as
	// kube-apiserver's delegated authentication (--authentication-token-webhook-cache-ttl
	// of an aggregated API server).
	CacheTTL metav1.Duration `json:"cacheTTL,omitempty"`
	// FailureCacheTTL is how long a failed review (unauthenticated, not an
	// error) is reused. Default 10s.
	FailureCacheTTL metav1.Duration `json:"failureCacheTTL,omitempty"`
	// Timeout bounds one review, retries included. Default 10s.
	Timeout metav1.Duration `json:"timeout,omitempty"`
}

// IsEnabled reports whether the delegated review runs: Enabled, or unset and
// cluster mode.
func (d *DelegatedAuthentication) IsEnabled(c Cluster) bool {
	if d.Enabled != nil {
		return *d.Enabled
	}
	return c.Kubeconfig != "" || c.InCluster
}

// Authentication defaults.
const (
	// DefaultProjectTokenIssuer is the iss claim of deputy's project tokens.
	DefaultProjectTokenIssuer = "deputy.dev/project-tokens"
	// DefaultDelegatedCacheTTL is how long delegated reviews are cached.
	DefaultDelegatedCacheTTL = 10 * time.Second
	// DefaultDelegatedTimeout bounds one delegated review.
	DefaultDelegatedTimeout = 10 * time.Second
)

// SetAuthenticationDefaults fills the authentication defaults: the API
// audience https://kubernetes.default.svc.cluster.local, the project token
// issuer deputy.dev/project-tokens, and 10s cache TTLs and timeout of the
// delegated review.
func SetAuthenticationDefaults(a *Authentication) {
	if len(a.APIAudiences) == 0 {
		a.APIAudiences = []string{DefaultAPIAudience}
	}
	if a.ProjectTokens.Issuer == "" {
		a.ProjectTokens.Issuer = DefaultProjectTokenIssuer
	}
	if a.Delegated.CacheTTL.Duration == 0 {
		a.Delegated.CacheTTL.Duration = DefaultDelegatedCacheTTL
	}
	if a.Delegated.FailureCacheTTL.Duration == 0 {
		a.Delegated.FailureCacheTTL.Duration = DefaultDelegatedCacheTTL
	}
	if a.Delegated.Timeout.Duration == 0 {
		a.Delegated.Timeout.Duration = DefaultDelegatedTimeout
	}
}

// validateAuthentication checks the authentication section; cluster is
// deputy's cluster connection (delegated reviews need one).
func validateAuthentication(a *Authentication, cluster Cluster, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, aud := range a.APIAudiences {
		if strings.TrimSpace(aud) == "" {
			errs = append(errs, field.Invalid(fld.Child("apiAudiences").Index(i), aud, "must not be empty"))
		}
	}
	errs = append(errs, validateJWTAuthenticators(a.JWT, a.ProjectTokens.Issuer, fld)...)
	errs = append(errs, validateProjectTokens(&a.ProjectTokens, fld.Child("projectTokens"))...)

	dfld := fld.Child("delegated")
	if a.Delegated.Enabled != nil && *a.Delegated.Enabled && cluster.Kubeconfig == "" && !cluster.InCluster {
		errs = append(errs, field.Invalid(dfld.Child("enabled"), true,
			"the delegated TokenReview needs cluster mode: set cluster.kubeconfig (--kubeconfig) or cluster.inCluster (--in-cluster), or remove delegated.enabled"))
	}
	for name, d := range map[string]time.Duration{"cacheTTL": a.Delegated.CacheTTL.Duration, "failureCacheTTL": a.Delegated.FailureCacheTTL.Duration} {
		if d < 0 {
			errs = append(errs, field.Invalid(dfld.Child(name), d.String(), "must not be negative (0 keeps the default 10s)"))
		}
	}
	if a.Delegated.Timeout.Duration < 0 {
		errs = append(errs, field.Invalid(dfld.Child("timeout"), a.Delegated.Timeout.Duration.String(), "must not be negative (0 keeps the default 10s)"))
	}
	return errs
}

// validateJWTAuthenticators validates the jwt list as kube-apiserver validates
// its --authentication-config (k8s.io/apiserver validation, with the project
// token issuer disallowed as kube-apiserver disallows its service account
// issuers), plus deputy's own rules. Paths are rooted at fld.
func validateJWTAuthenticators(jwts []JWTAuthenticator, projectIssuer string, fld *field.Path) field.ErrorList {
	if len(jwts) == 0 {
		return nil
	}
	var errs field.ErrorList
	internal := make([]apiserver.JWTAuthenticator, 0, len(jwts))
	for i := range jwts {
		j := &jwts[i]
		jfld := fld.Child("jwt").Index(i)
		in, err := j.Internal()
		if err != nil {
			errs = append(errs, field.Invalid(jfld, "<jwt authenticator>", fmt.Sprintf("cannot be converted: %v", err)))
			continue
		}
		if j.CertificateAuthorityFile != "" && j.Issuer.CertificateAuthority != "" {
			errs = append(errs, field.Invalid(jfld.Child("certificateAuthorityFile"), j.CertificateAuthorityFile,
				"set either issuer.certificateAuthority (PEM content) or certificateAuthorityFile (a PEM file), not both"))
		}
		if j.Issuer.EgressSelectorType != "" {
			errs = append(errs, field.Forbidden(jfld.Child("issuer", "egressSelectorType"),
				"deputy has no egress selector: remove issuer.egressSelectorType (deputy dials the issuer directly)"))
			in.Issuer.EgressSelectorType = ""
		}
		internal = append(internal, in)
	}
	var disallowed []string
	if projectIssuer != "" {
		disallowed = []string{projectIssuer}
	}
	upstream := apiservervalidation.ValidateAuthenticationConfiguration(authenticationcel.NewDefaultCompiler(),
		&apiserver.AuthenticationConfiguration{JWT: internal}, disallowed)
	for _, e := range upstream {
		// Upstream paths start at "jwt[i]"; put them under authentication.
		e.Field = fld.String() + "." + e.Field
		e.Detail = strings.ReplaceAll(e.Detail, " jwt[", " "+fld.String()+".jwt[")
		if strings.Contains(e.Detail, "disallowed issuers") {
			e.Detail += " (it is authentication.projectTokens.issuer: give the project tokens or the OIDC issuer another name)"
		}
		errs = append(errs, e)
	}
	return errs
}

func validateProjectTokens(p *ProjectTokens, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(p.Issuer) == "" || strings.ContainsAny(p.Issuer, " \t\r\n") {
		errs = append(errs, field.Invalid(fld.Child("issuer"), p.Issuer, "must be a non-empty string without blanks, e.g. "+DefaultProjectTokenIssuer))
	}
	if p.SigningKeyFile != "" && strings.TrimSpace(p.SigningKeyFile) == "" {
		errs = append(errs, field.Invalid(fld.Child("signingKeyFile"), p.SigningKeyFile, "must not be blank: a PEM EC P-256 private key file (deputy token keygen)"))
	}
	seen := map[string]int{}
	for i, f := range p.VerificationKeyFiles {
		if strings.TrimSpace(f) == "" {
			errs = append(errs, field.Invalid(fld.Child("verificationKeyFiles").Index(i), f, "must not be empty: a PEM public key file"))
			continue
		}
		if j, dup := seen[f]; dup {
			errs = append(errs, field.Duplicate(fld.Child("verificationKeyFiles").Index(i), fmt.Sprintf("%s (also verificationKeyFiles[%d])", f, j)))
		}
		seen[f] = i
	}
	if p.RevocationFile != "" && !p.Enabled() {
		errs = append(errs, field.Invalid(fld.Child("revocationFile"), p.RevocationFile,
			"a revocation list without project tokens does nothing: set signingKeyFile or verificationKeyFiles, or remove revocationFile"))
	}
	return errs
}

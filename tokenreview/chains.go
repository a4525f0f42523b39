package tokenreview

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/token/cache"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// Authenticator names, the authenticator label of the metrics and the names
// in errors. JWT authenticators are "oidc:" + their issuer URL.
const (
	AuthenticatorTokenFile       = "token-file"
	AuthenticatorProject         = "project"
	AuthenticatorDelegated       = "delegated"        // the cache in front of the remote review
	AuthenticatorDelegatedRemote = "delegated-remote" // the TokenReviews actually sent
)

// Options are the parts of the token chains that come from the rest of deputy
// rather than from its configuration. Every field is optional.
type Options struct {
	// ClusterConfig is the client configuration of cluster mode
	// (webhook.ClusterRESTConfig); nil is file mode, where there is no
	// delegated TokenReview.
	ClusterConfig *rest.Config
	// StaticTokens returns the current static token file set (the policy
	// snapshot's); nil: no token file.
	StaticTokens func() *policy.TokenSet
	// ProjectRoles reports whether a project token's AppProject role exists
	// (SnapshotProjectRoles in file mode, with ClusterProjectRoles in cluster
	// mode); nil finds none, so every project token is refused.
	ProjectRoles ProjectRoleLookup
	// Registerer receives the authentication metrics; nil records none.
	Registerer prometheus.Registerer
	// OnRevocationReload, if set, is told when the revocation list was
	// reloaded or could not be (err set; the last list stays in force), so
	// the caller can log it: the package itself never logs.
	OnRevocationReload func(file string, revoked int, err error)
}

// Chains are deputy's two token authenticator chains.
type Chains struct {
	// Webhook answers /authenticate (wrap it with NewReviewer): the static
	// token file, project tokens, the JWT (OIDC) authenticators. Never a
	// delegated TokenReview: kube-apiserver runs its whole chain, deputy's
	// webhook included, for a TokenReview, so delegating would loop.
	Webhook authenticator.Token
	// API authenticates callers of deputy's own API: the webhook chain, then
	// the delegated TokenReview to the cluster (ServiceAccount tokens etc.)
	// behind a cache with success and failure TTLs.
	API authenticator.Token
	// Project verifies project tokens; nil when they are not configured.
	Project *ProjectTokenAuthenticator
	// Revocations is the project token revocation list; nil without one.
	Revocations *RevocationList

	healthChecks []func() error
}

// HealthCheck reports the JWT authenticators that cannot verify tokens yet
// (their issuer's discovery document or keys have not been fetched). It is
// not a readiness check: an unreachable identity provider must not take
// deputy's authorization webhook out of service.
func (c *Chains) HealthCheck() error {
	var errs []error
	for _, check := range c.healthChecks {
		if err := check(); err != nil {
			errs = append(errs, err)
		}
	}
	return utilerrors.NewAggregate(errs)
}

// NewFromConfig builds deputy's token authenticator chains from the
// (defaulted, validated) authentication section, the way kube-apiserver
// composes its own (k8s.io/kubernetes pkg/kubeapiserver/authenticator):
//
//   - token file: NewTokenFileAuthenticator over opts.StaticTokens, valid for
//     the API audiences only;
//   - project tokens (when a key is configured): NewProjectTokenAuthenticator,
//     with the first and final word on tokens that carry its issuer;
//   - JWT (OIDC): one k8s.io/apiserver oidc authenticator per cfg.JWT entry,
//     with all signing algorithms allowed and the project token issuer
//     disallowed, in a fail-on-error union treated as valid for the API
//     audiences — exactly as kube-apiserver with --authentication-config;
//   - API chain only, when delegation is enabled (cfg.Delegated, default on
//     in cluster mode): a k8s.io/apiserver token webhook authenticator over
//     the cluster's TokenReview API, behind k8s.io/apiserver's token cache
//     (cfg.Delegated.CacheTTL / FailureCacheTTL; errors are not cached).
//
// Only the delegated review is cached. JWT verification is local (an ECDSA or
// RSA signature check and the claim mappings); the OIDC authenticator fetches
// the issuer's keys in the background and on an unknown kid, never per token;
// and /authenticate answers are cached by kube-apiserver itself
// (--authentication-token-webhook-cache-ttl), so a second cache in deputy
// would only delay revocations and role deletions.
//
// Every authenticator but the project one is guarded: a user it returns with
// the project identity (user name or a group with the prefix deputy:project:,
// extra deputy.dev/project*) is refused with an error, so no identity mapping
// can impersonate a project token or join the group RBAC binds for one. Each authenticator is measured (metrics with
// opts.Registerer). ctx bounds background work: the OIDC key refresh and the
// revocation list reload.
//
// Errors: a key, CA or revocation file cannot be read, a JWT authenticator
// cannot be built, delegation is enabled without a cluster, or the metrics are
// already registered; each names the configuration field to fix.
func NewFromConfig(ctx context.Context, cfg config.Authentication, opts Options) (*Chains, error) {
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	apiAuds := slices.Clone(cfg.APIAudiences)
	chains := &Chains{}

	// Project tokens.
	if cfg.ProjectTokens.Enabled() {
		keys, err := loadProjectKeys(cfg.ProjectTokens)
		if err != nil {
			return nil, err
		}
		var revoked func(string) bool
		if f := cfg.ProjectTokens.RevocationFile; f != "" {
			if chains.Revocations, err = LoadRevocationList(f); err != nil {
				return nil, err
			}
			var onReload func(int, error)
			if opts.OnRevocationReload != nil {
				onReload = func(n int, err error) { opts.OnRevocationReload(f, n, err) }
			}
			go chains.Revocations.Run(ctx, onReload)
			revoked = chains.Revocations.Revoked
		}
		chains.Project, err = NewProjectTokenAuthenticator(ProjectTokenOptions{
			Issuer: cfg.ProjectTokens.Issuer, Keys: keys, Revoked: revoked, Roles: opts.ProjectRoles,
			APIAudiences: apiAuds, Rejected: m.reject,
		})
		if err != nil {
			return nil, err
		}
	}

	// JWT (OIDC) authenticators.
	type named struct {
		name, issuer string
		auth         authenticator.Token
	}
	var jwts []named
	for i := range cfg.JWT {
		j := &cfg.JWT[i]
		fld := fmt.Sprintf("authentication.jwt[%d]", i)
		in, err := j.Internal()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fld, err)
		}
		if j.CertificateAuthorityFile != "" {
			data, err := os.ReadFile(j.CertificateAuthorityFile)
			if err != nil {
				return nil, fmt.Errorf("failed to read %s.certificateAuthorityFile of issuer %s: %w", fld, j.Issuer.URL, err)
			}
			in.Issuer.CertificateAuthority = string(data)
		}
		var ca oidc.CAContentProvider
		if in.Issuer.CertificateAuthority != "" {
			if ca, err = dynamiccertificates.NewStaticCAContent("oidc-authenticator", []byte(in.Issuer.CertificateAuthority)); err != nil {
				return nil, fmt.Errorf("%s: the issuer's CA (issuer.certificateAuthority or certificateAuthorityFile) is not a PEM certificate bundle: %w", fld, err)
			}
		}
		var disallowed []string
		if cfg.ProjectTokens.Issuer != "" {
			disallowed = []string{cfg.ProjectTokens.Issuer}
		}
		a, err := oidc.New(ctx, oidc.Options{
			JWTAuthenticator:  in,
			CAContentProvider: ca,
			// As kube-apiserver with --authentication-config: any algorithm
			// that matches one of the issuer's keys.
			SupportedSigningAlgs: oidc.AllValidSigningAlgorithms(),
			DisallowedIssuers:    disallowed,
		})
		if err != nil {
			return nil, fmt.Errorf("%s (issuer %s): %w", fld, j.Issuer.URL, err)
		}
		jwts = append(jwts, named{name: "oidc:" + j.Issuer.URL, issuer: j.Issuer.URL, auth: a})
		chains.healthChecks = append(chains.healthChecks, a.HealthCheck)
	}

	// Delegated TokenReview (API chain only).
	var delegated authenticator.Token
	enabled := opts.ClusterConfig != nil
	if cfg.Delegated.Enabled != nil {
		enabled = *cfg.Delegated.Enabled
	}
	if enabled {
		if opts.ClusterConfig == nil {
			return nil, errors.New("authentication.delegated.enabled needs cluster mode: set cluster.kubeconfig (--kubeconfig) or cluster.inCluster (--in-cluster), or remove it")
		}
		restCfg := rest.CopyConfig(opts.ClusterConfig)
		if restCfg.UserAgent == "" {
			restCfg.UserAgent = "deputy (" + rest.DefaultKubernetesUserAgent() + ")"
		}
		cs, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			return nil, fmt.Errorf("failed to build the client of the delegated TokenReview (cluster.kubeconfig / cluster.inCluster): %w", err)
		}
		noop := tokenwebhook.AuthenticatorMetrics{
			RecordRequestTotal:   func(context.Context, string) {},
			RecordRequestLatency: func(context.Context, string, float64) {},
		}
		remote, err := tokenwebhook.NewFromInterface(cs.AuthenticationV1(), apiAuds, *tokenwebhook.DefaultRetryBackoff(), cfg.Delegated.Timeout.Duration, noop)
		if err != nil {
			return nil, fmt.Errorf("failed to build the delegated TokenReview authenticator: %w", err)
		}
		cached := cache.New(m.instrument(chainAPI, AuthenticatorDelegatedRemote, remote), false,
			cfg.Delegated.CacheTTL.Duration, cfg.Delegated.FailureCacheTTL.Duration)
		delegated = m.instrument(chainAPI, AuthenticatorDelegated, reserveProjectIdentity(AuthenticatorDelegated, cached))
	}

	build := func(chain string, extra authenticator.Token) authenticator.Token {
		var rest []authenticator.Token
		if len(jwts) > 0 {
			list := make([]authenticator.Token, len(jwts))
			for i, j := range jwts {
				list[i] = skipOtherIssuers(j.issuer, m.instrument(chain, j.name, reserveProjectIdentity(j.name, j.auth)))
			}
			rest = append(rest, authenticator.WrapAudienceAgnosticToken(apiAuds, tokenunion.NewFailOnError(list...)))
		}
		if extra != nil {
			rest = append(rest, extra)
		}
		var after authenticator.Token
		if len(rest) > 0 {
			after = tokenunion.New(rest...)
		}
		if chains.Project != nil {
			after = projectFirst{project: chains.Project, observe: m.observer(chain, AuthenticatorProject), rest: after}
		}
		fileAuth := m.instrument(chain, AuthenticatorTokenFile, reserveProjectIdentity(AuthenticatorTokenFile,
			authenticator.WrapAudienceAgnosticToken(apiAuds, NewTokenFileAuthenticator(opts.StaticTokens))))
		if after == nil {
			return fileAuth
		}
		return tokenunion.New(fileAuth, after)
	}
	chains.Webhook = build(chainWebhook, nil)
	chains.API = build(chainAPI, delegated)
	return chains, nil
}

// loadProjectKeys reads the signing key's public half and the verification
// keys; a key listed twice is kept once.
func loadProjectKeys(p config.ProjectTokens) ([]*VerificationKey, error) {
	var keys []*VerificationKey
	seen := map[string]bool{}
	if p.SigningKeyFile != "" {
		k, err := LoadSigningKey(p.SigningKeyFile)
		if err != nil {
			return nil, fmt.Errorf("authentication.projectTokens.signingKeyFile: %w", err)
		}
		keys = append(keys, k.Public())
		seen[k.KeyID()] = true
	}
	for i, f := range p.VerificationKeyFiles {
		k, err := LoadVerificationKey(f)
		if err != nil {
			return nil, fmt.Errorf("authentication.projectTokens.verificationKeyFiles[%d]: %w", i, err)
		}
		if !seen[k.KeyID()] {
			keys = append(keys, k)
			seen[k.KeyID()] = true
		}
	}
	return keys, nil
}

// reserveProjectIdentity refuses, with an error naming name, a user that a
// has authenticated with the identity only project tokens may carry.
func reserveProjectIdentity(name string, a authenticator.Token) authenticator.Token {
	return authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		resp, ok, err := a.AuthenticateToken(ctx, token)
		if ok && resp != nil && resp.User != nil && hasProjectIdentity(resp.User) {
			return nil, false, fmt.Errorf("the %s authenticator returned user %q with deputy's project token identity (user name or group prefix %q, or user extra %s/%s), which only deputy's project tokens may carry: change that authenticator's identity mapping (e.g. a jwt claimMappings.username.prefix or claimMappings.groups.prefix) or the token file's user and groups",
				name, resp.User.GetName(), ProjectUserPrefix, ExtraProject, ExtraProjectRole)
		}
		return resp, ok, err
	})
}

func hasProjectIdentity(u user.Info) bool {
	if strings.HasPrefix(u.GetName(), ProjectUserPrefix) {
		return true
	}
	if slices.ContainsFunc(u.GetGroups(), func(g string) bool { return strings.HasPrefix(g, ProjectUserPrefix) }) {
		return true
	}
	extra := u.GetExtra()
	_, p := extra[ExtraProject]
	_, r := extra[ExtraProjectRole]
	return p || r
}

// SnapshotProjectRoles looks roles up in the deputy.dev AppProjects of the
// current policy snapshot (file mode). A nil snapshot finds nothing.
func SnapshotProjectRoles(current func() *policy.Snapshot) ProjectRoleLookup {
	return func(namespace, name, role string) bool {
		return hasRole(current().DeputyAppProject(namespace, name), role)
	}
}

// ClusterProjectRoles looks roles up in the deputy.dev AppProjects read from
// the cluster (cluster mode). A nil state finds nothing.
func ClusterProjectRoles(current func() *policy.ClusterState) ProjectRoleLookup {
	return func(namespace, name, role string) bool {
		return hasRole(current().DeputyAppProject(namespace, name), role)
	}
}

// FirstProjectRoles asks each lookup in order and reports whether any finds
// the project's role.
func FirstProjectRoles(lookups ...ProjectRoleLookup) ProjectRoleLookup {
	return func(namespace, name, role string) bool {
		for _, l := range lookups {
			if l != nil && l(namespace, name, role) {
				return true
			}
		}
		return false
	}
}

// hasRole reports whether p has a role named role; a nil p has none.
func hasRole(p *v1alpha1.AppProject, role string) bool {
	if p == nil {
		return false
	}
	return slices.ContainsFunc(p.Spec.Roles, func(r v1alpha1.ProjectRole) bool { return r.Name == role })
}

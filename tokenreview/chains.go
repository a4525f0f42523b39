package tokenreview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/token/cache"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/internal/secretfile"
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

// Options configure NewChains: what the configuration's authentication
// section says (APIAudiences, ProjectTokens, JWT, Delegated; mapped by the
// composition root) and what comes from the rest of deputy. Every field is
// optional.
type Options struct {
	// APIAudiences are the audiences static tokens, project tokens and the
	// JWT authenticators are valid for (authentication.apiAudiences).
	APIAudiences []string
	// ProjectTokens configures deputy's project tokens; without a key file
	// they are not accepted.
	ProjectTokens ProjectTokenFiles
	// JWT are the OIDC / JWT authenticators, in order
	// (authentication.jwt).
	JWT []JWTAuthenticator
	// Delegated configures the API chain's delegated TokenReview
	// (authentication.delegated).
	Delegated Delegation
	// ClusterConfig is the client configuration of cluster mode
	// (cluster.kubeconfig or cluster.inCluster, loaded by package serve);
	// nil is file mode, where there is no delegated TokenReview.
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

// ProjectTokenFiles are the files of deputy's project tokens
// (authentication.projectTokens).
type ProjectTokenFiles struct {
	// Issuer is the tokens' iss claim; the JWT authenticators may not use it.
	Issuer string
	// SigningKeyFile is the PEM EC P-256 private key whose public half
	// verifies tokens; "" for none.
	SigningKeyFile string
	// VerificationKeyFiles are further PEM keys whose tokens are accepted
	// (the previous signing keys during a rotation).
	VerificationKeyFiles []string
	// RevocationFile lists revoked token IDs, re-read within a second of a
	// change; "" for none.
	RevocationFile string
}

// Enabled reports whether project tokens are accepted: a signing or a
// verification key is configured.
func (p *ProjectTokenFiles) Enabled() bool {
	return p.SigningKeyFile != "" || len(p.VerificationKeyFiles) > 0
}

// JWTAuthenticator is one OIDC / JWT authenticator.
type JWTAuthenticator struct {
	// Config is the jwt entry of kube-apiserver's --authentication-config in
	// k8s.io/apiserver's internal type, the one its OIDC authenticator takes.
	Config apiserver.JWTAuthenticator
	// CertificateAuthorityFile, when set, is a PEM file read at start into
	// Config.Issuer.CertificateAuthority (deputy's certificateAuthorityFile).
	CertificateAuthorityFile string
}

// Delegation configures the delegated TokenReview of the API chain.
type Delegation struct {
	// Enabled turns it on; it needs ClusterConfig.
	Enabled bool
	// CacheTTL and FailureCacheTTL are how long a successful and a failed
	// (unauthenticated, not an error) review is reused; 0 does not cache.
	CacheTTL, FailureCacheTTL time.Duration
	// Timeout bounds one review, retries included; 0 is no bound.
	Timeout time.Duration
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

	// healthChecks are the JWT authenticators' (see healthCheck).
	healthChecks []func() error
}

// healthCheck reports the JWT authenticators that cannot verify tokens yet
// (their issuer's discovery document or keys have not been fetched). It is
// deliberately neither a readiness check nor exported: an unreachable
// identity provider must not take deputy's authorization webhook out of
// service, and deputy serves while the keys are fetched in the background.
// The tests wait on it.
func (c *Chains) healthCheck() error {
	var errs []error
	for _, check := range c.healthChecks {
		if err := check(); err != nil {
			errs = append(errs, err)
		}
	}
	return utilerrors.NewAggregate(errs)
}

// namedJWT is one built JWT authenticator and the names it is measured and
// matched by.
type namedJWT struct {
	name, issuer string
	auth         authenticator.Token
}

// NewChains builds deputy's token authenticator chains, the way
// kube-apiserver composes its own (k8s.io/kubernetes
// pkg/kubeapiserver/authenticator):
//
//   - token file: NewTokenFileAuthenticator over opts.StaticTokens, valid for
//     the API audiences only;
//   - project tokens (when a key is configured): NewProjectTokenAuthenticator,
//     with the first and final word on tokens that carry its issuer;
//   - JWT (OIDC): one k8s.io/apiserver oidc authenticator per opts.JWT entry,
//     with all signing algorithms allowed and the project token issuer
//     disallowed, in a fail-on-error union treated as valid for the API
//     audiences — exactly as kube-apiserver with --authentication-config;
//   - API chain only, when opts.Delegated.Enabled: a k8s.io/apiserver token
//     webhook authenticator over the cluster's TokenReview API, behind
//     k8s.io/apiserver's token cache (Delegated.CacheTTL / FailureCacheTTL;
//     errors are not cached).
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
// can impersonate a project token or join the group RBAC binds for one. Each
// authenticator is measured (metrics with opts.Registerer). ctx bounds
// background work: the OIDC key refresh and the revocation list reload.
//
// Errors: a key, CA or revocation file cannot be read, a JWT authenticator
// cannot be built, delegation is enabled without a cluster, or the metrics are
// already registered; each names the configuration field to fix.
func NewChains(ctx context.Context, opts Options) (*Chains, error) {
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	apiAuds := slices.Clone(opts.APIAudiences)
	chains := &Chains{}
	if opts.ProjectTokens.Enabled() {
		if err := chains.addProjectTokens(ctx, opts, apiAuds, m); err != nil {
			return nil, err
		}
	}
	jwts, err := chains.newJWTAuthenticators(ctx, opts)
	if err != nil {
		return nil, err
	}
	var delegated authenticator.Token
	if opts.Delegated.Enabled {
		if delegated, err = newDelegated(opts, apiAuds, m); err != nil {
			return nil, err
		}
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

// addProjectTokens sets c.Project (and c.Revocations, whose reload runs
// until ctx ends) from opts.ProjectTokens.
func (c *Chains) addProjectTokens(ctx context.Context, opts Options, apiAuds []string, m *metrics) error {
	p := &opts.ProjectTokens
	keys, err := loadProjectKeys(p)
	if err != nil {
		return err
	}
	var revoked func(string) bool
	if f := p.RevocationFile; f != "" {
		if c.Revocations, err = LoadRevocationList(f); err != nil {
			return err
		}
		var onReload func(int, error)
		if opts.OnRevocationReload != nil {
			onReload = func(n int, err error) { opts.OnRevocationReload(f, n, err) }
		}
		go c.Revocations.Run(ctx, onReload)
		revoked = c.Revocations.Revoked
	}
	c.Project, err = NewProjectTokenAuthenticator(ProjectTokenOptions{
		Issuer: p.Issuer, Keys: keys, Revoked: revoked, Roles: opts.ProjectRoles,
		APIAudiences: apiAuds, Rejected: m.reject,
	})
	return err
}

// newJWTAuthenticators builds one k8s.io/apiserver OIDC authenticator per
// opts.JWT entry and records its health check in c.
func (c *Chains) newJWTAuthenticators(ctx context.Context, opts Options) ([]namedJWT, error) {
	var jwts []namedJWT
	for i := range opts.JWT {
		j := &opts.JWT[i]
		fld := fmt.Sprintf("authentication.jwt[%d]", i)
		in := *j.Config.DeepCopy()
		if j.CertificateAuthorityFile != "" {
			data, err := secretfile.Read(j.CertificateAuthorityFile, secretfile.MaxBytes)
			if err != nil {
				return nil, fmt.Errorf("failed to read %s.certificateAuthorityFile of issuer %s: %w", fld, in.Issuer.URL, err)
			}
			in.Issuer.CertificateAuthority = string(data)
		}
		var ca oidc.CAContentProvider
		if in.Issuer.CertificateAuthority != "" {
			var err error
			if ca, err = dynamiccertificates.NewStaticCAContent("oidc-authenticator", []byte(in.Issuer.CertificateAuthority)); err != nil {
				return nil, fmt.Errorf("%s: the issuer's CA (issuer.certificateAuthority or certificateAuthorityFile) is not a PEM certificate bundle: %w", fld, err)
			}
		}
		var disallowed []string
		if opts.ProjectTokens.Issuer != "" {
			disallowed = []string{opts.ProjectTokens.Issuer}
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
			return nil, fmt.Errorf("%s (issuer %s): %w", fld, in.Issuer.URL, err)
		}
		jwts = append(jwts, namedJWT{name: "oidc:" + in.Issuer.URL, issuer: in.Issuer.URL, auth: a})
		c.healthChecks = append(c.healthChecks, a.HealthCheck)
	}
	return jwts, nil
}

// newDelegated builds the API chain's delegated TokenReview: the cluster's
// TokenReview API behind k8s.io/apiserver's token cache.
func newDelegated(opts Options, apiAuds []string, m *metrics) (authenticator.Token, error) {
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
	d := opts.Delegated
	remote, err := tokenwebhook.NewFromInterface(cs.AuthenticationV1(), apiAuds, *tokenwebhook.DefaultRetryBackoff(), d.Timeout, noop)
	if err != nil {
		return nil, fmt.Errorf("failed to build the delegated TokenReview authenticator: %w", err)
	}
	cached := cache.New(m.instrument(chainAPI, AuthenticatorDelegatedRemote, remote), false, d.CacheTTL, d.FailureCacheTTL)
	return m.instrument(chainAPI, AuthenticatorDelegated, reserveProjectIdentity(AuthenticatorDelegated, cached)), nil
}

// loadProjectKeys reads the signing key's public half and the verification
// keys; a key listed twice is kept once.
func loadProjectKeys(p *ProjectTokenFiles) ([]*VerificationKey, error) {
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

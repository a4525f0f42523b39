package tokenreview

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Project token identity: the user name and group prefix and the user extra
// keys that carry the project and role. Only the project token authenticator
// may produce them (see reserveProjectIdentity).
const (
	// ProjectUserPrefix starts the user name of every project token,
	// deputy:project:NAMESPACE/NAME:ROLE, and its only group,
	// deputy:project:NAMESPACE/NAME (ProjectGroupName).
	ProjectUserPrefix = "deputy:project:"
	// ExtraProject is the user extra key holding "NAMESPACE/NAME" of the
	// token's AppProject.
	ExtraProject = "deputy.dev/project"
	// ExtraProjectRole is the user extra key holding the token's role.
	ExtraProjectRole = "deputy.dev/project-role"
	// ExtraCredentialID is kube-apiserver's user extra key for the credential
	// that authenticated, "JTI=<jti>" for JWTs, so audit logs name the token
	// to revoke.
	ExtraCredentialID = "authentication.kubernetes.io/credential-id"
)

// projectClaimKey is the private claim of project tokens, shaped like the
// "kubernetes.io" claim of ServiceAccount tokens.
const projectClaimKey = "deputy.dev"

// projectClockSkew is how far iat and nbf may lie in the future: the signer
// (`deputy token create` on an operator's machine) and deputy may disagree
// about the time. Expiry gets no leeway.
const projectClockSkew = time.Minute

// MaxProjectTokenTTL bounds a project token's lifetime (exp - iat), at issue
// and at verification: a stolen token must not outlive every rotation.
const MaxProjectTokenTTL = 90 * 24 * time.Hour

// ProjectUserName is the user name of a project token for role of the
// AppProject namespace/name.
func ProjectUserName(namespace, name, role string) string {
	return ProjectUserPrefix + namespace + "/" + name + ":" + role
}

// ProjectGroupName is the one group every project token of the AppProject
// namespace/name carries, whatever its role: deputy:project:NAMESPACE/NAME.
// Bind RBAC to it (or to ProjectUserName for one role). A project token's
// groups derive from nothing else: spec.roles[].groups are, as in Argo CD,
// the OIDC groups granted the role, never groups its tokens carry, so no
// field a project admin writes puts a token into another Kubernetes group.
func ProjectGroupName(namespace, name string) string {
	return ProjectUserPrefix + namespace + "/" + name
}

// ProjectTokenRequest describes a project token to issue.
type ProjectTokenRequest struct {
	// Namespace and Name name the deputy.dev AppProject; Role one of its
	// spec.roles.
	Namespace, Name, Role string
	// TTL is the token's lifetime; required, positive.
	TTL time.Duration
	// Audiences is the aud claim; required (deputy token create defaults it to
	// the API audiences).
	Audiences []string
	// Issuer is the iss claim (authentication.projectTokens.issuer).
	Issuer string
}

// IssuedProjectToken describes an issued token, everything but the token.
type IssuedProjectToken struct {
	ID        string // jti: what the revocation file lists
	KeyID     string
	UserName  string
	Audiences []string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

type projectClaims struct {
	Project projectClaim `json:"deputy.dev"`
}

type projectClaim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Role      string `json:"role"`
}

// IssueProjectToken signs a project token with key at time now.
//
// Errors: an invalid request (each problem names the flag to fix) or a
// signing failure.
func IssueProjectToken(key *SigningKey, req ProjectTokenRequest, now time.Time) (string, IssuedProjectToken, error) {
	var problems []string
	for _, e := range validation.IsDNS1123Subdomain(req.Namespace) {
		problems = append(problems, "project namespace "+e)
	}
	for _, e := range validation.IsDNS1123Subdomain(req.Name) {
		problems = append(problems, "project name "+e)
	}
	if strings.TrimSpace(req.Role) == "" {
		problems = append(problems, "role must not be empty: name one of the AppProject's spec.roles (--role)")
	}
	if req.TTL <= 0 || req.TTL > MaxProjectTokenTTL {
		problems = append(problems, fmt.Sprintf("ttl %s must be positive and at most %s (--ttl, e.g. 24h)", req.TTL, MaxProjectTokenTTL))
	}
	if len(req.Audiences) == 0 || slices.Contains(req.Audiences, "") {
		problems = append(problems, "audiences must be non-empty strings (--audience)")
	}
	if req.Issuer == "" {
		problems = append(problems, "issuer must not be empty (authentication.projectTokens.issuer)")
	}
	if key == nil {
		problems = append(problems, "no signing key (authentication.projectTokens.signingKeyFile or --signing-key)")
	}
	if len(problems) > 0 {
		return "", IssuedProjectToken{}, fmt.Errorf("cannot issue the project token: %s", strings.Join(problems, "; "))
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", IssuedProjectToken{}, fmt.Errorf("failed to generate a token ID: %w", err)
	}
	info := IssuedProjectToken{
		ID:        base64.RawURLEncoding.EncodeToString(id[:]),
		KeyID:     key.KeyID(),
		UserName:  ProjectUserName(req.Namespace, req.Name, req.Role),
		Audiences: slices.Clone(req.Audiences),
		IssuedAt:  now.Truncate(time.Second),
	}
	info.ExpiresAt = info.IssuedAt.Add(req.TTL)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key.key, KeyID: key.keyID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", IssuedProjectToken{}, fmt.Errorf("failed to create the token signer: %w", err)
	}
	std := jwt.Claims{
		Issuer:    req.Issuer,
		Subject:   info.UserName,
		Audience:  jwt.Audience(info.Audiences),
		IssuedAt:  jwt.NewNumericDate(info.IssuedAt),
		NotBefore: jwt.NewNumericDate(info.IssuedAt),
		Expiry:    jwt.NewNumericDate(info.ExpiresAt),
		ID:        info.ID,
	}
	priv := projectClaims{Project: projectClaim{Namespace: req.Namespace, Name: req.Name, Role: req.Role}}
	token, err := jwt.Signed(signer).Claims(std).Claims(priv).Serialize()
	if err != nil {
		return "", IssuedProjectToken{}, fmt.Errorf("failed to sign the project token: %w", err)
	}
	return token, info, nil
}

// ProjectRoleLookup reports whether the deputy.dev AppProject namespace/name
// has the role role (spec.roles[].name). It is called on every verification,
// so a deleted project or role stops its tokens at once. Only the role's
// existence counts: what the role lists (groups, policies) never reaches the
// token's identity (see ProjectGroupName).
type ProjectRoleLookup func(namespace, name, role string) bool

// ProjectTokenOptions configure NewProjectTokenAuthenticator.
type ProjectTokenOptions struct {
	// Issuer is the iss claim tokens must carry.
	Issuer string
	// Keys verify signatures, found by the token's kid. At least one.
	Keys []*VerificationKey
	// Revoked reports whether a jti is revoked; nil revokes nothing.
	Revoked func(jti string) bool
	// Roles reports whether the token's project role exists; nil finds no
	// role (every token fails).
	Roles ProjectRoleLookup
	// APIAudiences are the audiences checked when the context carries none,
	// as kube-apiserver's ServiceAccount token authenticator does.
	APIAudiences []string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Rejected, if set, is told why a token of this issuer was refused
	// (metrics): one of the ProjectReject* reasons.
	Rejected func(reason string)
}

// Reasons a project token is refused, as metric label values.
const (
	ProjectRejectMalformed  = "malformed"
	ProjectRejectUnknownKey = "unknown_kid"
	ProjectRejectSignature  = "signature"
	ProjectRejectExpired    = "expired"
	ProjectRejectNotYet     = "not_yet_valid"
	ProjectRejectAudience   = "audience"
	ProjectRejectRevoked    = "revoked"
	ProjectRejectNoRole     = "unknown_project_role"
	// ProjectRejectLifetime: the token lives longer than MaxProjectTokenTTL.
	ProjectRejectLifetime = "lifetime"
)

// ProjectTokenAuthenticator verifies deputy's project tokens. It is immutable
// and safe for concurrent use.
type ProjectTokenAuthenticator struct {
	issuer       string
	issuerJSON   []byte // the issuer as a JSON string, quotes included
	keys         map[string]*VerificationKey
	revoked      func(string) bool
	roles        ProjectRoleLookup
	apiAudiences authenticator.Audiences
	now          func() time.Time
	rejected     func(string)
}

// NewProjectTokenAuthenticator returns the verifier of project tokens.
//
// Errors: no issuer or no key.
func NewProjectTokenAuthenticator(opts ProjectTokenOptions) (*ProjectTokenAuthenticator, error) {
	if opts.Issuer == "" {
		return nil, errors.New("project tokens: no issuer (authentication.projectTokens.issuer)")
	}
	if len(opts.Keys) == 0 {
		return nil, errors.New("project tokens: no verification key (authentication.projectTokens.signingKeyFile or verificationKeyFiles)")
	}
	a := &ProjectTokenAuthenticator{
		issuer: opts.Issuer, keys: make(map[string]*VerificationKey, len(opts.Keys)),
		revoked: opts.Revoked, roles: opts.Roles, apiAudiences: slices.Clone(opts.APIAudiences),
		now: opts.Now, rejected: opts.Rejected,
	}
	for _, k := range opts.Keys {
		a.keys[k.keyID] = k
	}
	var err error
	if a.issuerJSON, err = json.Marshal(opts.Issuer); err != nil {
		return nil, fmt.Errorf("project tokens: issuer %q cannot be encoded: %w", opts.Issuer, err)
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.revoked == nil {
		a.revoked = func(string) bool { return false }
	}
	if a.rejected == nil {
		a.rejected = func(string) {}
	}
	return a, nil
}

// AuthenticateToken implements authenticator.Token. A token that is not a
// project token, or one that fails verification, is (nil, false, nil): a
// refused token is not a fault, and the reason goes to Rejected, never into
// an error (errors become status.error, which kube-apiserver does not cache).
func (a *ProjectTokenAuthenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	resp, _ := a.authenticate(ctx, token)
	return resp, resp != nil, nil
}

// authenticate verifies token; owned reports whether the token claims to be
// one of deputy's project tokens (a JWS whose unverified iss is the project
// token issuer). For owned tokens the answer is final: no other authenticator
// may accept them (see projectFirst).
func (a *ProjectTokenAuthenticator) authenticate(ctx context.Context, token string) (resp *authenticator.Response, owned bool) {
	if !a.mayBeOurs(token) {
		return nil, false
	}
	// Parse accepting every algorithm only to see whose token it is; the
	// signature is verified below with ES256 alone.
	tok, err := jwt.ParseSigned(token, allJWSAlgorithms)
	if err != nil {
		return nil, false
	}
	var peek jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&peek); err != nil || peek.Issuer != a.issuer {
		return nil, false
	}
	if len(tok.Headers) != 1 || tok.Headers[0].Algorithm != string(jose.ES256) {
		a.rejected(ProjectRejectMalformed)
		return nil, true
	}
	key, ok := a.keys[tok.Headers[0].KeyID]
	if !ok {
		a.rejected(ProjectRejectUnknownKey)
		return nil, true
	}
	var std jwt.Claims
	var priv projectClaims
	if err := tok.Claims(key.key, &std, &priv); err != nil {
		a.rejected(ProjectRejectSignature)
		return nil, true
	}
	now := a.now()
	if std.Expiry == nil || !now.Before(std.Expiry.Time()) {
		a.rejected(ProjectRejectExpired)
		return nil, true
	}
	if std.IssuedAt == nil || std.Expiry.Time().Sub(std.IssuedAt.Time()) > MaxProjectTokenTTL {
		a.rejected(ProjectRejectLifetime)
		return nil, true
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: a.issuer, Time: now}, projectClockSkew); err != nil {
		if errors.Is(err, jwt.ErrNotValidYet) || errors.Is(err, jwt.ErrIssuedInTheFuture) {
			a.rejected(ProjectRejectNotYet)
		} else {
			a.rejected(ProjectRejectMalformed)
		}
		return nil, true
	}
	p := priv.Project
	if std.ID == "" || p.Namespace == "" || p.Name == "" || p.Role == "" || std.Subject != ProjectUserName(p.Namespace, p.Name, p.Role) {
		a.rejected(ProjectRejectMalformed)
		return nil, true
	}
	// Audiences as kube-apiserver checks ServiceAccount tokens
	// (pkg/serviceaccount/jwt.go): the requested ones, else the API
	// audiences, must intersect the token's.
	requested, ok := authenticator.AudiencesFrom(ctx)
	if !ok {
		requested = a.apiAudiences
	}
	auds := requested.Intersect(authenticator.Audiences(std.Audience))
	if len(auds) == 0 {
		a.rejected(ProjectRejectAudience)
		return nil, true
	}
	if a.revoked(std.ID) {
		a.rejected(ProjectRejectRevoked)
		return nil, true
	}
	if a.roles == nil {
		a.rejected(ProjectRejectNoRole)
		return nil, true
	}
	if !a.roles(p.Namespace, p.Name, p.Role) {
		a.rejected(ProjectRejectNoRole)
		return nil, true
	}
	// The identity derives from the signed project and role alone. The
	// role's spec.roles[].groups are never carried: whoever may edit the
	// AppProject would otherwise choose the token's Kubernetes groups
	// (kubeadm:cluster-admins, system:masters) at its next use.
	return &authenticator.Response{
		User: &user.DefaultInfo{
			Name:   std.Subject,
			Groups: []string{ProjectGroupName(p.Namespace, p.Name)},
			Extra: map[string][]string{
				ExtraProject:      {p.Namespace + "/" + p.Name},
				ExtraProjectRole:  {p.Role},
				ExtraCredentialID: {"JTI=" + std.ID},
			},
		},
		Audiences: auds,
	}, true
}

// mayBeOurs is the cheap pre-check that keeps every other token (the
// ServiceAccount JWTs of the API chain above all) from paying for a full JWS
// parse: a compact JWS whose decoded payload contains the issuer as a JSON
// string. Every token deputy signs passes (go-jose writes iss as json.Marshal
// does); a token that does not cannot verify against deputy's keys, so
// declining it is safe. A payload too large to peek at takes the full parse.
func (a *ProjectTokenAuthenticator) mayBeOurs(token string) bool {
	contains, ok := peekPayload(token, a.issuerJSON, false)
	if !ok {
		return strings.Count(token, ".") == 2 // large or undecodable: the parse decides
	}
	return contains
}

// allJWSAlgorithms lets any JWS be parsed to see whose it is; only ES256
// signatures are ever verified.
var allJWSAlgorithms = []jose.SignatureAlgorithm{
	jose.EdDSA, jose.HS256, jose.HS384, jose.HS512, jose.RS256, jose.RS384, jose.RS512,
	jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512,
}

// projectFirst gives the project token authenticator the first and final word
// on the tokens it owns; every other token goes to rest. Without it, an
// expired or revoked project token would reach the API chain's delegated
// TokenReview, and kube-apiserver may still hold a cached success for it
// from deputy's webhook.
type projectFirst struct {
	project *ProjectTokenAuthenticator
	// observe instruments the project authenticator (metrics); may be nil.
	observe func(start time.Time, ok bool, err error)
	rest    authenticator.Token
}

func (p projectFirst) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	start := time.Now()
	resp, owned := p.project.authenticate(ctx, token)
	if owned {
		if p.observe != nil {
			p.observe(start, resp != nil, nil)
		}
		return resp, resp != nil, nil
	}
	if p.rest == nil {
		return nil, false, nil
	}
	return p.rest.AuthenticateToken(ctx, token)
}

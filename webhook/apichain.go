package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	auditpolicy "k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/path"
	authzunion "k8s.io/apiserver/pkg/authorization/union"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/client-go/kubernetes/scheme"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/tokenreview"
)

// APIAuthenticationOptions configure NewAPIAuthenticator. Every part is
// optional; with none, every request is unauthenticated.
type APIAuthenticationOptions struct {
	// ClientCA verifies client certificates (user = common name, groups =
	// organizations); nil disables them.
	ClientCA x509request.VerifyOptionFunc
	// RequestHeader trusts a front proxy's identity headers; nil disables it.
	RequestHeader *APIRequestHeader
	// Tokens authenticates bearer tokens (deputy's API token chain).
	Tokens authenticator.Token
	// Anonymous admits requests without credentials as system:anonymous.
	Anonymous bool
}

// APIRequestHeader is the front-proxy authentication of kube-apiserver's
// --requestheader-* flags: the headers are trusted only on a connection whose
// client certificate VerifyOptions verify and whose common name is one of
// AllowedNames (any, when empty).
type APIRequestHeader struct {
	VerifyOptions                                                  x509request.VerifyOptionFunc
	AllowedNames                                                   []string
	UsernameHeaders, UIDHeaders, GroupHeaders, ExtraHeaderPrefixes []string
}

// config is the RequestHeaderConfig WithAuthentication uses to strip the
// identity headers after authentication.
func (r *APIRequestHeader) config() *authenticatorfactory.RequestHeaderConfig {
	if r == nil {
		return nil
	}
	return &authenticatorfactory.RequestHeaderConfig{
		UsernameHeaders:     headerrequest.StaticStringSlice(r.UsernameHeaders),
		UIDHeaders:          headerrequest.StaticStringSlice(r.UIDHeaders),
		GroupHeaders:        headerrequest.StaticStringSlice(r.GroupHeaders),
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice(r.ExtraHeaderPrefixes),
		AllowedClientNames:  headerrequest.StaticStringSlice(r.AllowedNames),
	}
}

// NewAPIAuthenticator is the authenticator of deputy's own API, composed from
// k8s.io/apiserver pieces in kube-apiserver's order
// (pkg/kubeapiserver/authenticator.Config.New): front-proxy request headers,
// client certificate, bearer token, in a union where the first success
// wins; every authenticated user also gets system:authenticated; then, only
// when enabled, anonymous (system:anonymous, system:unauthenticated).
func NewAPIAuthenticator(o APIAuthenticationOptions) authenticator.Request {
	var chain []authenticator.Request
	if rh := o.RequestHeader; rh != nil {
		c := rh.config()
		chain = append(chain, headerrequest.NewDynamicVerifyOptionsSecure(rh.VerifyOptions,
			c.AllowedClientNames, c.UsernameHeaders, c.UIDHeaders, c.GroupHeaders, c.ExtraHeaderPrefixes))
	}
	if o.ClientCA != nil {
		chain = append(chain, x509request.NewDynamic(o.ClientCA, x509request.CommonNameUserConversion))
	}
	if o.Tokens != nil {
		chain = append(chain, bearertoken.New(o.Tokens))
	}
	var authn authenticator.Request = group.NewAuthenticatedGroupAdder(union.New(chain...))
	if o.Anonymous {
		authn = union.NewFailOnError(authn, anonymous.NewAuthenticator(nil))
	}
	return authn
}

// alwaysAllowPaths are answered without authorization, as kube-apiserver's
// --authorization-always-allow-paths of aggregated servers.
var alwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

// NewAPIAuthorizer is the authorizer of deputy's own API, a union where the
// first Allow or Deny decides: members of system:masters (kube-apiserver's
// privileged group; the aggregation layer's availability checks come as
// such), the health paths, discovery of deputy's groups for authenticated
// users (kube-apiserver's system:discovery role), the project-token scope
// (Deny), deputy's own authorizer, then the optional delegated one (a
// SubjectAccessReview to the cluster).
func NewAPIAuthorizer(scope authorizer.Authorizer, deputy authorizer.Authorizer, delegated authorizer.Authorizer) (authorizer.Authorizer, error) {
	paths, err := path.NewAuthorizer(alwaysAllowPaths)
	if err != nil {
		return nil, err
	}
	var members []authzunion.NamedAuthorizer
	if scope != nil {
		// First: a project token's scope holds whatever groups it carries.
		members = append(members, authzunion.NamedAuthorizer{AuthorizerName: "project-token-scope", Authorizer: scope})
	}
	members = append(members,
		authzunion.NamedAuthorizer{AuthorizerName: "privileged-groups", Authorizer: authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)},
		authzunion.NamedAuthorizer{AuthorizerName: "always-allow-paths", Authorizer: paths},
		authzunion.NamedAuthorizer{AuthorizerName: "discovery", Authorizer: authorizer.AuthorizerFunc(authorizeDiscovery)})
	members = append(members, authzunion.NamedAuthorizer{AuthorizerName: "deputy", Authorizer: deputy})
	if delegated != nil {
		members = append(members, authzunion.NamedAuthorizer{AuthorizerName: "delegated", Authorizer: delegated})
	}
	return authzunion.New(members...)
}

// authorizeDiscovery allows authenticated users to GET /apis and the
// discovery documents of API groups, as kube-apiserver's system:discovery
// ClusterRole (bound to system:authenticated) does.
func authorizeDiscovery(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.IsResourceRequest() || a.GetVerb() != "get" || a.GetUser() == nil {
		return authorizer.DecisionNoOpinion, "", nil
	}
	authenticated := false
	for _, g := range a.GetUser().GetGroups() {
		authenticated = authenticated || g == user.AllAuthenticated
	}
	p := strings.TrimSuffix(a.GetPath(), "/")
	if authenticated && (p == "/apis" || (strings.HasPrefix(p, "/apis/") && strings.Count(p, "/") <= 3)) {
		return authorizer.DecisionAllow, "discovery", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// NewProjectScopeAuthorizer denies a deputy project token (tokenreview
// project tokens: user.Info extra deputy.dev/project) any request that is not
// about an existing Application of its project; it has no opinion on the
// rest, so the policy still decides what a project token may do in its own
// project. It goes first in NewAPIAuthorizer: no group a token carries lifts
// its scope. The handlers check the scope again on the Application they act
// on. It reads Applications and their AppProjects from applications.
func NewProjectScopeAuthorizer(applications apps.Applications) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if _, restricted := tokenreview.ProjectOf(a.GetUser()); !restricted {
			return authorizer.DecisionNoOpinion, "", nil
		}
		if !a.IsResourceRequest() || a.GetAPIGroup() != v1alpha1.Group || a.GetResource() != "applications" || a.GetName() == "" {
			return authorizer.DecisionDeny, "deputy project tokens may only get, diff and sync Applications of their project", nil
		}
		app, err := applications.Application(a.GetNamespace(), a.GetName())
		if errors.Is(err, policy.ErrNotLoaded) {
			// Not known yet: the handler answers 503 (and checks the scope
			// again on the Application it acts on).
			return authorizer.DecisionNoOpinion, "", nil
		}
		if err != nil {
			return authorizer.DecisionDeny, "", err // fail closed
		}
		// A missing Application is refused too (403, not 404): a project
		// token learns nothing about other projects' Applications.
		if err := checkProjectScope(applications, a.GetUser(), app); err != nil {
			if errors.Is(err, policy.ErrNotLoaded) {
				return authorizer.DecisionNoOpinion, "", nil
			}
			return authorizer.DecisionDeny, err.Error(), nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

// checkProjectScope is tokenreview.CheckProjectScope with app's AppProject
// resolved by applications (a project app may not use is no project:
// refused).
// Errors: policy.ErrNotLoaded while projects are not loaded; the scope's
// refusal.
func checkProjectScope(applications apps.Applications, u user.Info, app *v1alpha1.Application) error {
	var project *v1alpha1.AppProject
	if app != nil {
		p, err := applications.AppProject(app)
		switch {
		case errors.Is(err, policy.ErrNotLoaded):
			return err
		case err == nil:
			project = p
		}
	}
	return tokenreview.CheckProjectScope(u, app, project)
}

// requestInfoResolver resolves deputy's API paths as kube-apiserver does
// (RequestInfoFactory), with requests through the aggregation layer
// (/apis/<aggregated group>/...) authorized as the same request of
// deputy.dev: one policy for both ways in.
type requestInfoResolver struct {
	factory         *request.RequestInfoFactory
	aggregatedGroup string
}

func newRequestInfoResolver(aggregatedGroup string) *requestInfoResolver {
	return &requestInfoResolver{
		factory:         &request.RequestInfoFactory{APIPrefixes: sets.NewString("apis"), GrouplessAPIPrefixes: sets.NewString()},
		aggregatedGroup: aggregatedGroup,
	}
}

func (r *requestInfoResolver) NewRequestInfo(req *http.Request) (*request.RequestInfo, error) {
	info, err := r.factory.NewRequestInfo(req)
	if err == nil && info.IsResourceRequest && r.aggregatedGroup != "" && info.APIGroup == r.aggregatedGroup {
		info.APIGroup = v1alpha1.Group
	}
	return info, err
}

// APIChainOptions configure WithAPIChain.
type APIChainOptions struct {
	Authenticator authenticator.Request
	// RequestHeader is the front-proxy configuration (its headers are
	// removed after authentication); nil when not trusted.
	RequestHeader *APIRequestHeader
	APIAudiences  []string
	Authorizer    authorizer.Authorizer
	// AggregatedGroup is the API group of requests through the aggregation
	// layer ("" for none).
	AggregatedGroup string
	// Ready, if set, is asked after authentication: an error (the policy is
	// not loaded yet) answers 503 before authorization is attempted.
	Ready func() error
	// Log receives one audit line per request ("api audit").
	Log *slog.Logger
}

// WithAPIChain wraps deputy's API handler in kube-apiserver's handler chain
// (k8s.io/apiserver/pkg/server.DefaultBuildHandlerChain, the parts that
// apply), from the outside in: panic recovery → request info →
// authentication (the Authorization header and the front-proxy headers are
// removed afterwards; failure is kube-apiserver's 401) → audit (one log line
// per request at Metadata level: who, what, the decision and its reason, the
// response code; never a credential) → authorization (kube-apiserver's 403,
// 500 on an authorizer error, which is never an Allow) → handler. The
// handler finds the user with request.UserFrom.
func WithAPIChain(handler http.Handler, o APIChainOptions) http.Handler {
	codecs := scheme.Codecs.WithoutConversion()
	resolver := newRequestInfoResolver(o.AggregatedGroup)
	sink := &auditLogSink{log: o.Log}
	if sink.log == nil {
		sink.log = slog.New(slog.DiscardHandler)
	}
	policy := auditpolicy.NewFakePolicyRuleEvaluator(auditinternal.LevelMetadata, []auditinternal.Stage{auditinternal.StageRequestReceived})
	longRunning := func(r *http.Request, _ *request.RequestInfo) bool { return r.URL.Query().Get("watch") == "true" }

	h := genericapifilters.WithAuthorization(handler, o.Authorizer, codecs)
	if o.Ready != nil {
		h = withReady(h, o.Ready)
	}
	h = genericapifilters.WithAudit(h, sink, policy, longRunning)
	unauthorized := genericapifilters.Unauthorized(codecs)
	// kube-apiserver removes the Authorization header after a successful
	// authentication; deputy also after a failed one.
	failed := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Authorization")
		unauthorized.ServeHTTP(w, r)
	}))
	failed = genericapifilters.WithFailedAuthenticationAudit(failed, sink, policy)
	h = genericapifilters.WithAuthentication(h, o.Authenticator, failed, authenticator.Audiences(o.APIAudiences), o.RequestHeader.config())
	h = genericapifilters.WithRequestInfo(h, resolver)
	h = genericapifilters.WithAuditInit(h)
	h = genericapifilters.WithRequestReceivedTimestamp(h)
	return genericfilters.WithPanicRecovery(h, resolver)
}

// withReady answers 503 while ready returns an error.
func withReady(next http.Handler, ready func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := ready(); err != nil {
			writeStatus(w, fromAPIError(apierrors.NewServiceUnavailable(err.Error()+"; see /readyz")))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// auditLogSink writes audit events as log lines (an audit.Sink).
type auditLogSink struct{ log *slog.Logger }

var _ audit.Sink = (*auditLogSink)(nil)

func (s *auditLogSink) ProcessEvents(events ...*auditinternal.Event) bool {
	for _, ev := range events {
		attrs := []any{"auditID", string(ev.AuditID), "stage", string(ev.Stage), "verb", ev.Verb, "uri", ev.RequestURI,
			"user", ev.User.Username, "groups", ev.User.Groups, "sourceIPs", ev.SourceIPs}
		if ids := ev.User.Extra["authentication.kubernetes.io/credential-id"]; len(ids) > 0 {
			attrs = append(attrs, "credentialID", ids[0]) // e.g. JTI=...: names the token, is not the token
		}
		if ev.ImpersonatedUser != nil {
			attrs = append(attrs, "impersonatedUser", ev.ImpersonatedUser.Username)
		}
		if ev.ObjectRef != nil {
			attrs = append(attrs, "resource", ev.ObjectRef.Resource, "subresource", ev.ObjectRef.Subresource,
				"namespace", ev.ObjectRef.Namespace, "name", ev.ObjectRef.Name, "apiGroup", ev.ObjectRef.APIGroup)
		}
		if ev.ResponseStatus != nil {
			attrs = append(attrs, "code", ev.ResponseStatus.Code)
		}
		if len(ev.Annotations) > 0 {
			b, _ := json.Marshal(ev.Annotations)
			attrs = append(attrs, "annotations", string(b))
		}
		if !ev.StageTimestamp.IsZero() && !ev.RequestReceivedTimestamp.IsZero() {
			attrs = append(attrs, "latency", ev.StageTimestamp.Sub(ev.RequestReceivedTimestamp.Time).Round(time.Microsecond).String())
		}
		s.log.Info("api audit", attrs...)
	}
	return true
}

// apiDiscovery is the APIResourceList of deputy's API for group/version,
// as kube-apiserver's discovery documents list resources.
func apiDiscovery(group string) map[string]any {
	return map[string]any{
		"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": fmt.Sprintf("%s/%s", group, v1alpha1.Version),
		"resources": []map[string]any{
			{"name": "applications", "singularName": "application", "namespaced": true, "kind": v1alpha1.KindApplication, "verbs": []string{"get"}},
			{"name": "applications/sync", "singularName": "", "namespaced": true, "kind": "SyncOperation", "verbs": []string{"create"}},
			{"name": "applications/diff", "singularName": "", "namespaced": true, "kind": v1alpha1.KindApplicationDiff, "verbs": []string{"get", "create"}},
		},
	}
}

package webhook

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/webhook/decisionlog"
)

// SubjectAccessReview versions deputy answers.
const (
	sarV1      = "authorization.k8s.io/v1"
	sarV1beta1 = "authorization.k8s.io/v1beta1"
	sarKind    = "SubjectAccessReview"
)

var subjectAccessReviewType = reviewType{kind: sarKind, v1: sarV1, v1beta1: sarV1beta1,
	limit: maxSubjectAccessReviewBytes, accepts: "authorization.k8s.io/v1 or v1beta1 SubjectAccessReview"}

// AuthorizeHandler answers SubjectAccessReviews (POST /authorize) with an
// authorizer.Authorizer, as kube-apiserver's webhook authorizer expects
// (plugin/pkg/authorizer/webhook): status.allowed for Allow, status.denied for
// Deny, neither for NoOpinion; the reason in status.reason and an evaluation
// error in status.evaluationError. The answer is in the request's apiVersion;
// v1beta1 spells the groups field "group".
//
// Every decision is counted in deputy_decisions_total{endpoint="authorize"}
// with the authorizer that decided (when Authorizer is a Decider, else
// "none" for a no opinion and "" otherwise) and the impersonation shape
// (deputyauthz.ImpersonationShape), and logged to DecisionLog when it wants
// it.
type AuthorizeHandler struct {
	Authorizer authorizer.Authorizer
	Metrics    *Metrics
	Log        *slog.Logger
	// DecisionLog, if set, receives the decisions its mode and sample rate
	// select (logging.decisions).
	DecisionLog *decisionlog.Logger
	// PolicyGeneration, if set, names the policy that decides, for the
	// decision log (serve: a prefix of the snapshot's digest). It is read
	// right after the decision: a reload in between is possible.
	PolicyGeneration func() string
}

// Decider is an authorizer that also tells which authorizer decided
// (deputy's authorizer.New).
type Decider interface {
	Decide(ctx context.Context, a authorizer.Attributes) deputyauthz.Result
}

// subjectAccessReview decodes a SubjectAccessReview of either version in one pass (the
// hot path: kube-apiserver calls /authorize for almost every request). The
// versions differ only in the spelling of the groups field ("groups" in v1,
// "group" in v1beta1); each version's answer reads only its own spelling,
// exactly as decoding into that version's type would.
type subjectAccessReview struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta       `json:"metadata"`
	Spec            subjectAccessReviewSpec `json:"spec"`
}

// subjectAccessReviewSpec is named so decode errors read
// "subjectAccessReviewSpec.spec.groups".
type subjectAccessReviewSpec struct {
	ResourceAttributes    *authorizationv1.ResourceAttributes    `json:"resourceAttributes"`
	NonResourceAttributes *authorizationv1.NonResourceAttributes `json:"nonResourceAttributes"`
	User                  string                                 `json:"user"`
	Groups                []string                               `json:"groups"` // v1
	Group                 []string                               `json:"group"`  // v1beta1
	Extra                 map[string]authorizationv1.ExtraValue  `json:"extra"`
	UID                   string                                 `json:"uid"`
}

// ServeHTTP implements http.Handler.
func (h *AuthorizeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in subjectAccessReview
	if !decodeReview(w, r, &subjectAccessReviewType, &in, &in.TypeMeta) {
		return
	}
	spec := authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes:    in.Spec.ResourceAttributes,
		NonResourceAttributes: in.Spec.NonResourceAttributes,
		User:                  in.Spec.User,
		Groups:                in.Spec.Groups,
		Extra:                 in.Spec.Extra,
		UID:                   in.Spec.UID,
	}
	if in.APIVersion == sarV1beta1 {
		spec.Groups = in.Spec.Group
	}
	if serr := validateSARSpec(spec.ResourceAttributes != nil, spec.NonResourceAttributes != nil, spec.User, len(spec.Groups)); serr != nil {
		writeStatus(w, serr)
		return
	}
	st := h.decide(r.Context(), attributesFromV1(&spec))
	if in.APIVersion == sarV1 {
		writeJSON(w, http.StatusOK, &authorizationv1.SubjectAccessReview{
			TypeMeta:   metav1.TypeMeta{APIVersion: sarV1, Kind: sarKind},
			ObjectMeta: in.Metadata, Spec: spec, Status: st,
		})
		return
	}
	out := &authorizationv1beta1.SubjectAccessReview{
		TypeMeta:   metav1.TypeMeta{APIVersion: sarV1beta1, Kind: sarKind},
		ObjectMeta: in.Metadata,
		Spec: authorizationv1beta1.SubjectAccessReviewSpec{
			User: spec.User, Groups: spec.Groups, UID: spec.UID,
		},
		Status: authorizationv1beta1.SubjectAccessReviewStatus{Allowed: st.Allowed, Denied: st.Denied, Reason: st.Reason, EvaluationError: st.EvaluationError},
	}
	// The attribute types of the two versions have identical fields.
	if ra := spec.ResourceAttributes; ra != nil {
		v := authorizationv1beta1.ResourceAttributes(*ra)
		out.Spec.ResourceAttributes = &v
	}
	if nra := spec.NonResourceAttributes; nra != nil {
		v := authorizationv1beta1.NonResourceAttributes(*nra)
		out.Spec.NonResourceAttributes = &v
	}
	if len(spec.Extra) > 0 {
		out.Spec.Extra = make(map[string]authorizationv1beta1.ExtraValue, len(spec.Extra))
		for k, v := range spec.Extra {
			out.Spec.Extra[k] = authorizationv1beta1.ExtraValue(v)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// validateSARSpec is kube-apiserver's ValidateSubjectAccessReviewSpec
// (pkg/apis/authorization/validation): exactly one of resourceAttributes and
// nonResourceAttributes, and a user or a group.
func validateSARSpec(hasResource, hasNonResource bool, userName string, groups int) *statusError {
	switch {
	case !hasResource && !hasNonResource:
		return badRequest("SubjectAccessReview spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified")
	case hasResource && hasNonResource:
		return badRequest("SubjectAccessReview spec.nonResourceAttributes: Invalid value: cannot be specified in combination with resourceAttributes")
	case userName == "" && groups == 0:
		return badRequest("SubjectAccessReview spec.user: Invalid value: \"\": at least one of user or group must be specified")
	}
	return nil
}

func (h *AuthorizeHandler) decide(ctx context.Context, a *authorizer.AttributesRecord) authorizationv1.SubjectAccessReviewStatus {
	var start time.Time
	if h.DecisionLog.Enabled() {
		start = time.Now()
	}
	res := h.authorize(ctx, a)
	st := authorizationv1.SubjectAccessReviewStatus{Reason: res.Reason}
	if res.Err != nil {
		st.EvaluationError = res.Err.Error()
	}
	var label string
	switch res.Decision {
	case authorizer.DecisionAllow:
		st.Allowed, label = true, "allow"
	case authorizer.DecisionDeny:
		st.Denied, label = true, "deny"
	default:
		label = "no_opinion"
	}
	shape := deputyauthz.ImpersonationShape(a)
	h.Metrics.authorizeDecision(label, res.Authorizer, shape)
	if h.DecisionLog.Wants(st.Allowed) {
		h.logDecision(ctx, a, &st, label, res.Authorizer, shape, start)
	}
	if h.Log.Enabled(ctx, slog.LevelDebug) {
		h.Log.LogAttrs(ctx, slog.LevelDebug, "authorization decision",
			slog.String("requestID", requestID(ctx)), slog.String("user", a.User.GetName()),
			slog.String("verb", a.Verb), slog.String("namespace", a.Namespace), slog.String("group", a.APIGroup),
			slog.String("resource", a.Resource), slog.String("subresource", a.Subresource), slog.String("name", a.Name),
			slog.String("path", a.Path), slog.String("decision", label), slog.String("reason", res.Reason),
			slog.String("authorizer", res.Authorizer))
	}
	return st
}

// authorize asks the Authorizer, through Decide when it is a Decider.
func (h *AuthorizeHandler) authorize(ctx context.Context, a authorizer.Attributes) deputyauthz.Result {
	if d, ok := h.Authorizer.(Decider); ok {
		return d.Decide(ctx, a)
	}
	decision, reason, err := h.Authorizer.Authorize(ctx, a)
	res := deputyauthz.Result{Decision: decision, Reason: reason, Err: err}
	if decision == authorizer.DecisionNoOpinion {
		res.Authorizer = deputyauthz.DecidedByNone
	}
	return res
}

// logDecision hands one decision to the decision log: attributes and the
// subject's names only (of extra, the keys: values may hold credential
// IDs), never the request's body or headers.
func (h *AuthorizeHandler) logDecision(ctx context.Context, a *authorizer.AttributesRecord, st *authorizationv1.SubjectAccessReviewStatus,
	decision, by, shape string, start time.Time) {
	now := time.Now()
	e := decisionlog.Entry{
		Time: now, RequestID: requestID(ctx),
		User: a.User.GetName(), UID: a.User.GetUID(), Groups: a.User.GetGroups(),
		Verb: a.Verb, APIGroup: a.APIGroup, APIVersion: a.APIVersion, Resource: a.Resource, Subresource: a.Subresource,
		Namespace: a.Namespace, Name: a.Name, Path: a.Path, ResourceRequest: a.ResourceRequest,
		Decision: decision, Reason: st.Reason, EvaluationError: st.EvaluationError,
		Authorizer: by, Impersonation: shape, Duration: now.Sub(start),
	}
	if extra := a.User.GetExtra(); len(extra) > 0 {
		e.ExtraKeys = slices.Sorted(maps.Keys(extra))
	}
	if h.PolicyGeneration != nil {
		e.PolicyGeneration = h.PolicyGeneration()
	}
	h.DecisionLog.Log(&e)
}

// attributesFromV1 is authorizationutil.AuthorizationAttributesFrom
// (pkg/registry/authorization/util/helpers.go) without label and field
// selectors, which deputy's authorizers do not read.
func attributesFromV1(spec *authorizationv1.SubjectAccessReviewSpec) *authorizer.AttributesRecord {
	u := &user.DefaultInfo{Name: spec.User, UID: spec.UID, Groups: spec.Groups, Extra: extraFromV1(spec.Extra)}
	if ra := spec.ResourceAttributes; ra != nil {
		return &authorizer.AttributesRecord{
			User: u, Verb: ra.Verb, Namespace: ra.Namespace, APIGroup: ra.Group, APIVersion: matchAllVersionIfEmpty(ra.Version),
			Resource: ra.Resource, Subresource: ra.Subresource, Name: ra.Name, ResourceRequest: true,
		}
	}
	nra := spec.NonResourceAttributes
	return &authorizer.AttributesRecord{User: u, ResourceRequest: false, Path: nra.Path, Verb: nra.Verb}
}

func extraFromV1(in map[string]authorizationv1.ExtraValue) map[string][]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string][]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// matchAllVersionIfEmpty is the helper of the same name in
// pkg/registry/authorization/util: an empty version means every version.
func matchAllVersionIfEmpty(version string) string {
	if version == "" {
		return "*"
	}
	return version
}

package webhook

import (
	"context"
	"log/slog"
	"net/http"

	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
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
type AuthorizeHandler struct {
	Authorizer authorizer.Authorizer
	Metrics    *Metrics
	Log        *slog.Logger
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
	decision, reason, err := h.Authorizer.Authorize(ctx, a)
	st := authorizationv1.SubjectAccessReviewStatus{Reason: reason}
	if err != nil {
		st.EvaluationError = err.Error()
	}
	var label string
	switch decision {
	case authorizer.DecisionAllow:
		st.Allowed, label = true, "allow"
	case authorizer.DecisionDeny:
		st.Denied, label = true, "deny"
	default:
		label = "no_opinion"
	}
	h.Metrics.decision("authorize", label)
	if h.Log.Enabled(ctx, slog.LevelDebug) {
		h.Log.LogAttrs(ctx, slog.LevelDebug, "authorization decision",
			slog.String("requestID", requestID(ctx)), slog.String("user", a.User.GetName()),
			slog.String("verb", a.Verb), slog.String("namespace", a.Namespace), slog.String("group", a.APIGroup),
			slog.String("resource", a.Resource), slog.String("subresource", a.Subresource), slog.String("name", a.Name),
			slog.String("path", a.Path), slog.String("decision", label), slog.String("reason", reason))
	}
	return st
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

package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	sigsjson "sigs.k8s.io/json"

	"deputy.dev/deputy/authorizer"
)

// Plural resource names of the RBAC roles in rbac.authorization.k8s.io.
const (
	rolesResource        = "roles"
	clusterRolesResource = "clusterroles"
)

// kube-apiserver's bootstrap RBAC objects (k8s.io/kubernetes
// plugin/pkg/auth/authorizer/rbac/bootstrappolicy, policy.go Label) carry
// this label; the roles among them are named system:<...>, except the
// cluster-wide cluster-admin, admin, edit and view.
const (
	bootstrapRBACLabel      = "kubernetes.io/bootstrapping"
	bootstrapRBACLabelValue = "rbac-defaults"
	bootstrapRBACPrefix     = "system:"
	// bootstrapClusterAdmin is the one unprefixed bootstrap ClusterRole with
	// rules of its own that grant impersonation (`*` on `*` in `*`); admin,
	// edit and view are aggregated.
	bootstrapClusterAdmin = "cluster-admin"
)

// impersonationRBACFix is the fix every finding names.
const impersonationRBACFix = "name the targets in resourceNames; deputy's strict impersonation gate ignores rules without resourceNames"

// NewImpersonationRBACValidator returns the validating admission handler for
// rbac.authorization.k8s.io/v1 Roles and ClusterRoles that grant broad
// impersonation: rules deputy's strict impersonation gate (package
// authorizer) ignores, because they do not name the targets.
//
// On CREATE and UPDATE of roles and clusterroles a rule is a finding when
// its resourceNames are empty and
//   - a verb is `impersonate`, `*` or `impersonate:<mode>`, and an
//     (apiGroup, resource) pair covers an impersonation target: users,
//     groups or serviceaccounts in "" (legacy); users, groups,
//     serviceaccounts, nodes, uids, userextras or userextras/<key> in
//     authentication.k8s.io (legacy uids/userextras and every constrained
//     check); `*` as group stands for both, `*` as resource for every
//     target and `*/<key>` for userextras/<key>. `*` verbs on other
//     resources are not findings: they do not reach an impersonation check;
//   - or a verb starts with `impersonate-on:`: those checks carry the real
//     request's group and resource, so such a rule is a finding in any
//     apiGroup, on any resource and on nonResourceURLs.
//
// A rule of the first kind whose resourceNames contain "*" is a finding too:
// "*" is literal in RBAC, but it is the name constrained impersonation asks
// for when four or more groups or extras are impersonated at once, so such a
// rule grants every group or extra.
//
// Not checked (allowed without a warning):
//   - kube-apiserver's bootstrap roles: objects labelled
//     kubernetes.io/bootstrapping=rbac-defaults and named system:<...> (among
//     them system:aggregate-to-edit, the source of the edit and admin roles'
//     impersonate on serviceaccounts), plus the ClusterRole cluster-admin.
//     kube-apiserver creates and repairs them at start-up and exits if it
//     cannot within 30 s, so they must never be denied. The label can be
//     copied by anyone who may write roles, which gains nothing: RBAC's
//     escalation check already requires the writer to hold every permission
//     the role grants (or the escalate verb). A system: name without the
//     label is checked like any other;
//   - ClusterRoles with an aggregationRule: their rules are written by
//     kube-controller-manager from the ClusterRoles the selectors match, and
//     those are checked themselves;
//   - other resources, subresources and operations.
//
// mode is config Authorization.Impersonation.GateRBAC. With "Warn" (or ""),
// the object is allowed with one warning per finding naming the object, the
// rule (rules[i]), its verbs, apiGroups and resources, and the fix. With
// "Deny" (or any other value: config validation admits only these two, and
// an unknown one fails closed), the object is denied with 403 Forbidden, a
// message listing every finding and one FieldValueForbidden cause per rule
// (field rules[i]). On UPDATE in Deny mode, findings the old object already
// had (an equal rule) are warnings only, so metadata and finalizer updates
// of roles that predate deputy, and partial clean-ups, are not blocked.
//
// Objects that cannot be decoded are denied with 400.
func NewImpersonationRBACValidator(mode string) admission.Handler {
	return &impersonationRBACValidator{deny: mode != "Warn" && mode != ""}
}

type impersonationRBACValidator struct {
	deny bool
}

var _ admission.Handler = (*impersonationRBACValidator)(nil)

// Handle implements admission.Handler.
func (v *impersonationRBACValidator) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Resource.Group != rbacv1.GroupName || req.SubResource != "" ||
		(req.Resource.Resource != rolesResource && req.Resource.Resource != clusterRolesResource) {
		return admission.Allowed("")
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	cluster := req.Resource.Resource == clusterRolesResource

	obj, err := rbacRoleDecode(req.Object.Raw, cluster)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if obj == nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("failed to decode %s: the request has no object", rbacRoleKind(cluster)))
	}
	if obj.aggregated || obj.bootstrap() {
		return admission.Allowed("")
	}
	findings := impersonationFindings(obj.rules)
	if len(findings) == 0 {
		return admission.Allowed("")
	}

	name := obj.meta.Name
	if name == "" {
		name = req.Name
	}
	namespace := obj.meta.Namespace
	if namespace == "" {
		namespace = req.Namespace
	}
	what := fmt.Sprintf("%s %q", rbacRoleKind(cluster), name)
	if !cluster {
		what = fmt.Sprintf("%s %q", rbacRoleKind(cluster), namespace+"/"+name)
	}

	if !v.deny {
		warnings := make([]string, 0, len(findings))
		for _, f := range findings {
			warnings = append(warnings, fmt.Sprintf("%s: %s: %s", what, f, impersonationRBACFix))
		}
		return admission.Allowed("").WithWarnings(warnings...)
	}

	var old []rbacv1.PolicyRule
	if req.Operation == admissionv1.Update {
		oldObj, err := rbacRoleDecode(req.OldObject.Raw, cluster)
		if err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("oldObject: %w", err))
		}
		if oldObj != nil && !oldObj.aggregated {
			old = oldObj.rules
		}
	}
	var denied []ruleFinding
	var warnings []string
	for _, f := range findings {
		if slices.ContainsFunc(old, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, f.rule) }) {
			warnings = append(warnings, fmt.Sprintf("%s: %s (an equal rule was already there, so this update is not denied): %s", what, f, impersonationRBACFix))
			continue
		}
		denied = append(denied, f)
	}
	if len(denied) == 0 {
		return admission.Allowed("").WithWarnings(warnings...)
	}

	parts := make([]string, 0, len(denied))
	causes := make([]metav1.StatusCause, 0, len(denied))
	for _, f := range denied {
		parts = append(parts, f.String())
		causes = append(causes, metav1.StatusCause{
			Type:    metav1.CauseType(field.ErrorTypeForbidden),
			Field:   f.path.String(),
			Message: f.detail(),
		})
	}
	msg := fmt.Sprintf("deputy denies roles that grant impersonation without naming the targets (gateRBAC: Deny): %s: %s",
		strings.Join(parts, "; "), impersonationRBACFix)
	status := apierrors.NewForbidden(schema.GroupResource{Group: rbacv1.GroupName, Resource: req.Resource.Resource}, name, errors.New(msg)).Status()
	status.Details.Causes = causes
	return admission.Response{
		AdmissionResponse: admissionv1.AdmissionResponse{
			Allowed: false,
			Result:  &status,
		},
	}.WithWarnings(warnings...)
}

// rbacRole is what the validator reads of a Role or ClusterRole.
type rbacRole struct {
	meta       metav1.ObjectMeta
	rules      []rbacv1.PolicyRule
	aggregated bool // a ClusterRole with an aggregationRule
	cluster    bool
}

// bootstrap reports whether r is one of kube-apiserver's bootstrap roles (see
// NewImpersonationRBACValidator).
func (r *rbacRole) bootstrap() bool {
	if r.meta.Labels[bootstrapRBACLabel] != bootstrapRBACLabelValue {
		return false
	}
	return strings.HasPrefix(r.meta.Name, bootstrapRBACPrefix) || (r.cluster && r.meta.Name == bootstrapClusterAdmin)
}

func rbacRoleKind(cluster bool) string {
	if cluster {
		return "ClusterRole"
	}
	return "Role"
}

// rbacRoleDecode decodes a Role or ClusterRole the way kube-apiserver decodes
// JSON (case-sensitive field names), ignoring unknown fields: kube-apiserver
// has already validated the object. An empty raw object is (nil, nil).
func rbacRoleDecode(raw []byte, cluster bool) (*rbacRole, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	kind := rbacRoleKind(cluster)
	if cluster {
		var cr rbacv1.ClusterRole
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &cr); err != nil {
			return nil, fmt.Errorf("failed to decode %s: %w", kind, err)
		}
		return &rbacRole{meta: cr.ObjectMeta, rules: cr.Rules, aggregated: cr.AggregationRule != nil, cluster: true}, nil
	}
	var r rbacv1.Role
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &r); err != nil {
		return nil, fmt.Errorf("failed to decode %s: %w", kind, err)
	}
	return &rbacRole{meta: r.ObjectMeta, rules: r.Rules}, nil
}

// ruleFinding is one rule that grants impersonation without naming targets.
type ruleFinding struct {
	path    *field.Path // rules[i]
	rule    rbacv1.PolicyRule
	problem string
}

// detail describes the rule and its problem, without the path.
func (f ruleFinding) detail() string {
	var what string
	if len(f.rule.NonResourceURLs) > 0 {
		what = fmt.Sprintf("verbs %q on nonResourceURLs %q", f.rule.Verbs, f.rule.NonResourceURLs)
	} else {
		what = fmt.Sprintf("verbs %q on resources %q in apiGroups %q", f.rule.Verbs, f.rule.Resources, f.rule.APIGroups)
	}
	return what + " " + f.problem
}

func (f ruleFinding) String() string { return f.path.String() + " (" + f.detail() + ")" }

// impersonationFindings returns the rules that grant impersonation without
// naming the targets, in order.
func impersonationFindings(rules []rbacv1.PolicyRule) []ruleFinding {
	var out []ruleFinding
	for i, rule := range rules {
		if problem := impersonationProblem(rule); problem != "" {
			out = append(out, ruleFinding{path: field.NewPath("rules").Index(i), rule: rule, problem: problem})
		}
	}
	return out
}

// impersonationProblem says what is wrong with rule, or "" when it grants no
// impersonation or names its targets (see NewImpersonationRBACValidator).
func impersonationProblem(rule rbacv1.PolicyRule) string {
	targets, on := false, false
	for _, verb := range rule.Verbs {
		if verb == rbacv1.VerbAll {
			targets = true
			continue
		}
		switch kind, _, _ := authorizer.ParseImpersonationVerb(verb); kind {
		case authorizer.LegacyImpersonate, authorizer.ConstrainedImpersonate:
			targets = true
		case authorizer.ImpersonateOn:
			on = true
		}
	}
	if len(rule.ResourceNames) == 0 {
		switch {
		case targets && coversImpersonationTarget(rule.APIGroups, rule.Resources):
			return "grants impersonation without resourceNames"
		case on && len(rule.NonResourceURLs) > 0:
			return "grants impersonate-on on nonResourceURLs, which cannot have resourceNames"
		case on:
			return "grants impersonate-on without resourceNames"
		}
		return ""
	}
	if targets && slices.Contains(rule.ResourceNames, "*") && coversImpersonationTarget(rule.APIGroups, rule.Resources) {
		return `grants impersonation of resourceNames "*", the name kube-apiserver asks for when many groups or extras are impersonated at once`
	}
	return ""
}

// coversImpersonationTarget reports whether some (group, resource) pair of a
// rule matches an impersonation check (authorizer.ImpersonationTargets), with
// RBAC's matching: `*` or exact group; `*`, exact resource, or `*/<sub>` for
// a resource with subresource <sub> (only userextras/<key> has one).
func coversImpersonationTarget(groups, resources []string) bool {
	for _, g := range groups {
		targets := authorizer.ImpersonationTargets(g)
		if g == rbacv1.APIGroupAll {
			targets = slices.Concat(authorizer.ImpersonationTargets(""), authorizer.ImpersonationTargets(authorizer.AuthenticationGroup))
		}
		if len(targets) == 0 {
			continue // no impersonation check names this group
		}
		extras := slices.Contains(targets, authorizer.UserExtrasResource)
		for _, r := range resources {
			switch {
			case r == rbacv1.ResourceAll, slices.Contains(targets, r):
				return true
			case extras && (strings.HasPrefix(r, authorizer.UserExtrasResource+"/") || strings.HasPrefix(r, "*/")):
				return true
			}
		}
	}
	return false
}

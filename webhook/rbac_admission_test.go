package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// rbacReview builds an admission.Request for rbac.authorization.k8s.io/v1
// the way the transport decodes it from an AdmissionReview v1 body. resource
// is roles or clusterroles; object and oldObject are JSON ("" for none).
func rbacReview(t *testing.T, resource, operation, object, oldObject string) admission.Request {
	t.Helper()
	kind, namespace := "ClusterRole", ""
	if resource == "roles" {
		kind, namespace = "Role", "team-a"
	}
	if object == "" {
		object = "null"
	}
	if oldObject == "" {
		oldObject = "null"
	}
	body := fmt.Sprintf(`{
		"apiVersion": "admission.k8s.io/v1",
		"kind": "AdmissionReview",
		"request": {
			"uid": "0b8d6a6c-5c1d-4a3e-9d52-1c7c2a1f0002",
			"kind": {"group": "rbac.authorization.k8s.io", "version": "v1", "kind": %[1]q},
			"resource": {"group": "rbac.authorization.k8s.io", "version": "v1", "resource": %[2]q},
			"name": "deployer",
			"namespace": %[3]q,
			"operation": %[4]q,
			"userInfo": {"username": "alice"},
			"object": %[5]s,
			"oldObject": %[6]s
		}
	}`, kind, resource, namespace, operation, object, oldObject)
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal([]byte(body), &review); err != nil {
		t.Fatalf("test AdmissionReview does not decode: %v\n%s", err, body)
	}
	return admission.Request{AdmissionRequest: *review.Request}
}

// clusterRoleJSON is a ClusterRole named name with labels (JSON object or
// "") and rules (a JSON array).
func clusterRoleJSON(name, labels, rules string) string {
	if labels == "" {
		labels = "{}"
	}
	return fmt.Sprintf(`{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": {"name": %q, "labels": %s}, "rules": %s}`, name, labels, rules)
}

const (
	// editImpersonateRule is the rule kube-apiserver's bootstrap
	// system:aggregate-to-edit carries, and so the aggregated edit and admin.
	editImpersonateRule = `{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}`
	bootstrapLabels     = `{"kubernetes.io/bootstrapping": "rbac-defaults"}`
	fix                 = `name the targets in resourceNames; deputy's strict impersonation gate ignores rules without resourceNames`
)

func TestImpersonationRBACValidator(t *testing.T) {
	tests := []struct {
		name         string
		mode         string
		request      func(t *testing.T) admission.Request
		wantAllowed  bool
		wantCode     int32
		wantReason   metav1.StatusReason
		wantMessage  string
		wantCauses   []metav1.StatusCause
		wantWarnings []string
	}{
		{
			name: "the edit role's impersonate on serviceaccounts without resourceNames is allowed with a warning in Warn mode",
			mode: "Warn",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`]`), "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
			wantWarnings: []string{
				`ClusterRole "sa-impersonator": rules[0] (verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames): ` + fix,
			},
		},
		{
			name: "the empty mode is the default Warn",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`]`), "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
			wantWarnings: []string{
				`ClusterRole "sa-impersonator": rules[0] (verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames): ` + fix,
			},
		},
		{
			name: "the edit role's impersonate on serviceaccounts without resourceNames is denied as Forbidden in Deny mode",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`]`), "")
			},
			wantCode:   http.StatusForbidden,
			wantReason: metav1.StatusReasonForbidden,
			wantMessage: `clusterroles.rbac.authorization.k8s.io "sa-impersonator" is forbidden: deputy denies roles that grant impersonation without naming the targets (gateRBAC: Deny): ` +
				`rules[0] (verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames): ` + fix,
			wantCauses: []metav1.StatusCause{{
				Type:    "FieldValueForbidden",
				Field:   "rules[0]",
				Message: `verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames`,
			}},
		},
		{
			name: "an unknown mode fails closed and denies",
			mode: "deny",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`]`), "")
			},
			wantCode:   http.StatusForbidden,
			wantReason: metav1.StatusReasonForbidden,
			wantMessage: `clusterroles.rbac.authorization.k8s.io "sa-impersonator" is forbidden: deputy denies roles that grant impersonation without naming the targets (gateRBAC: Deny): ` +
				`rules[0] (verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames): ` + fix,
			wantCauses: []metav1.StatusCause{{
				Type:    "FieldValueForbidden",
				Field:   "rules[0]",
				Message: `verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames`,
			}},
		},
		{
			name: "the same rule naming its targets in resourceNames is allowed without a warning",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				rules := `[{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"], "resourceNames": ["deployer"]}]`
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("sa-impersonator", "", rules), "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "every offending rule is listed with its field path and the harmless ones are not",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				rules := `[
					{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
					{"apiGroups": [""], "resources": ["pods"], "verbs": ["impersonate"]},
					{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
					{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["impersonate-on:serviceaccount:get"]},
					{"nonResourceURLs": ["*"], "verbs": ["*"]}
				]`
				return rbacReview(t, "clusterroles", "UPDATE", clusterRoleJSON("root", "", rules), clusterRoleJSON("root", "", `[]`))
			},
			wantCode:   http.StatusForbidden,
			wantReason: metav1.StatusReasonForbidden,
			wantMessage: `clusterroles.rbac.authorization.k8s.io "root" is forbidden: deputy denies roles that grant impersonation without naming the targets (gateRBAC: Deny): ` +
				`rules[2] (verbs ["*"] on resources ["*"] in apiGroups ["*"] grants impersonation without resourceNames); ` +
				`rules[3] (verbs ["impersonate-on:serviceaccount:get"] on resources ["configmaps"] in apiGroups [""] grants impersonate-on without resourceNames): ` + fix,
			wantCauses: []metav1.StatusCause{
				{Type: "FieldValueForbidden", Field: "rules[2]", Message: `verbs ["*"] on resources ["*"] in apiGroups ["*"] grants impersonation without resourceNames`},
				{Type: "FieldValueForbidden", Field: "rules[3]", Message: `verbs ["impersonate-on:serviceaccount:get"] on resources ["configmaps"] in apiGroups [""] grants impersonate-on without resourceNames`},
			},
		},
		{
			name: "a namespaced Role gets one warning per offending rule naming namespace and name",
			mode: "Warn",
			request: func(t *testing.T) admission.Request {
				obj := `{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "deployer", "namespace": "team-a"}, "rules": [
					{"apiGroups": ["authentication.k8s.io"], "resources": ["serviceaccounts"], "verbs": ["impersonate:serviceaccount"]},
					{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["impersonate-on:serviceaccount:patch"]}
				]}`
				return rbacReview(t, "roles", "CREATE", obj, "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
			wantWarnings: []string{
				`Role "team-a/deployer": rules[0] (verbs ["impersonate:serviceaccount"] on resources ["serviceaccounts"] in apiGroups ["authentication.k8s.io"] grants impersonation without resourceNames): ` + fix,
				`Role "team-a/deployer": rules[1] (verbs ["impersonate-on:serviceaccount:patch"] on resources ["deployments"] in apiGroups ["apps"] grants impersonate-on without resourceNames): ` + fix,
			},
		},
		{
			name: "kube-apiserver's bootstrap system:aggregate-to-edit with its label is exempt",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				labels := `{"kubernetes.io/bootstrapping": "rbac-defaults", "rbac.authorization.k8s.io/aggregate-to-edit": "true"}`
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("system:aggregate-to-edit", labels, `[`+editImpersonateRule+`]`), "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "kube-apiserver's bootstrap cluster-admin with its label is exempt",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				rules := `[{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}]`
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("cluster-admin", bootstrapLabels, rules), "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "a cluster-admin without the bootstrap label is checked",
			mode: "Warn",
			request: func(t *testing.T) admission.Request {
				rules := `[{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]`
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("cluster-admin", "", rules), "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
			wantWarnings: []string{
				`ClusterRole "cluster-admin": rules[0] (verbs ["*"] on resources ["*"] in apiGroups ["*"] grants impersonation without resourceNames): ` + fix,
			},
		},
		{
			name: "a system: role without the bootstrap label is checked: anyone can name a role system:foo",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("system:foo", "", `[`+editImpersonateRule+`]`), "")
			},
			wantCode:   http.StatusForbidden,
			wantReason: metav1.StatusReasonForbidden,
			wantMessage: `clusterroles.rbac.authorization.k8s.io "system:foo" is forbidden: deputy denies roles that grant impersonation without naming the targets (gateRBAC: Deny): ` +
				`rules[0] (verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames): ` + fix,
			wantCauses: []metav1.StatusCause{{
				Type:    "FieldValueForbidden",
				Field:   "rules[0]",
				Message: `verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames`,
			}},
		},
		{
			name: "the bootstrap label on a role without the system: prefix does not exempt it",
			mode: "Warn",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("sa-impersonator", bootstrapLabels, `[`+editImpersonateRule+`]`), "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
			wantWarnings: []string{
				`ClusterRole "sa-impersonator": rules[0] (verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames): ` + fix,
			},
		},
		{
			name: "an aggregated ClusterRole is allowed: its rules come from ClusterRoles checked themselves",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				obj := `{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "edit"},
					"aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}]},
					"rules": [` + editImpersonateRule + `]}`
				return rbacReview(t, "clusterroles", "UPDATE", obj, obj)
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "in Deny mode an update keeping an offending rule is allowed with a warning",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				old := clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`]`)
				obj := clusterRoleJSON("sa-impersonator", `{"team": "a"}`, `[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, `+editImpersonateRule+`]`)
				return rbacReview(t, "clusterroles", "UPDATE", obj, old)
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
			wantWarnings: []string{
				`ClusterRole "sa-impersonator": rules[1] (verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames) (an equal rule was already there, so this update is not denied): ` + fix,
			},
		},
		{
			name: "in Deny mode an update adding an offending rule is denied for the new rule only",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				old := clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`]`)
				obj := clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`, {"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]}]`)
				return rbacReview(t, "clusterroles", "UPDATE", obj, old)
			},
			wantCode:   http.StatusForbidden,
			wantReason: metav1.StatusReasonForbidden,
			wantMessage: `clusterroles.rbac.authorization.k8s.io "sa-impersonator" is forbidden: deputy denies roles that grant impersonation without naming the targets (gateRBAC: Deny): ` +
				`rules[1] (verbs ["impersonate"] on resources ["users" "groups"] in apiGroups [""] grants impersonation without resourceNames): ` + fix,
			wantCauses: []metav1.StatusCause{{
				Type:    "FieldValueForbidden",
				Field:   "rules[1]",
				Message: `verbs ["impersonate"] on resources ["users" "groups"] in apiGroups [""] grants impersonation without resourceNames`,
			}},
			wantWarnings: []string{
				`ClusterRole "sa-impersonator": rules[0] (verbs ["impersonate"] on resources ["serviceaccounts"] in apiGroups [""] grants impersonation without resourceNames) (an equal rule was already there, so this update is not denied): ` + fix,
			},
		},
		{
			name: "a DELETE is allowed without looking at the object",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "clusterroles", "DELETE", "", clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`]`))
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "an object that does not decode is denied with 400 and the decoding error",
			mode: "Warn",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("sa-impersonator", "", `"not a list"`), "")
			},
			wantCode:    http.StatusBadRequest,
			wantMessage: `failed to decode ClusterRole: json: cannot unmarshal string into Go struct field ClusterRole.rules of type []v1.PolicyRule`,
		},
		{
			name: "a Role whose old object does not decode is denied with 400 in Deny mode",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				obj := `{"metadata": {"name": "deployer"}, "rules": [` + editImpersonateRule + `]}`
				return rbacReview(t, "roles", "UPDATE", obj, `{"rules": 1}`)
			},
			wantCode:    http.StatusBadRequest,
			wantMessage: `oldObject: failed to decode Role: json: cannot unmarshal number into Go struct field Role.rules of type []v1.PolicyRule`,
		},
		{
			name: "a CREATE without an object is denied with 400",
			mode: "Warn",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "roles", "CREATE", "", "")
			},
			wantCode:    http.StatusBadRequest,
			wantMessage: `failed to decode Role: the request has no object`,
		},
		{
			name: "another RBAC resource is allowed with no opinion",
			mode: "Deny",
			request: func(t *testing.T) admission.Request {
				return rbacReview(t, "rolebindings", "CREATE", `{"rules": "not looked at"}`, "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := NewImpersonationRBACValidator(tt.mode).Handle(t.Context(), tt.request(t))
			checkAdmissionResponse(t, resp, admissionWant{allowed: tt.wantAllowed, code: tt.wantCode, reason: tt.wantReason,
				message: tt.wantMessage, causes: tt.wantCauses, warnings: tt.wantWarnings}, func(d *metav1.StatusDetails) {
				if d.Group != "rbac.authorization.k8s.io" || d.Kind != "clusterroles" && d.Kind != "roles" {
					t.Errorf("details group, kind = %q, %q; want rbac.authorization.k8s.io, clusterroles or roles", d.Group, d.Kind)
				}
			})
		})
	}
}

// TestImpersonationRBACRules pins which single rules are findings, by the
// group and resource kube-apiserver's impersonation checks use.
func TestImpersonationRBACRules(t *testing.T) {
	tests := []struct {
		name        string
		rule        string
		wantProblem string // "" when the rule is not a finding
	}{
		{name: "impersonate on pods is not impersonation of anyone", rule: `{"apiGroups": [""], "resources": ["pods"], "verbs": ["impersonate"]}`},
		{name: "star verbs on deployments reach no impersonation check", rule: `{"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]}`},
		{name: "star verbs on non-resource URLs reach no impersonation target", rule: `{"nonResourceURLs": ["*"], "verbs": ["*"]}`},
		{name: "legacy impersonate of users, groups and serviceaccounts in the core group", rule: `{"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]}`, wantProblem: "grants impersonation without resourceNames"},
		{name: "legacy impersonate of uids in authentication.k8s.io", rule: `{"apiGroups": ["authentication.k8s.io"], "resources": ["uids"], "verbs": ["impersonate"]}`, wantProblem: "grants impersonation without resourceNames"},
		{name: "legacy impersonate of one extra's values", rule: `{"apiGroups": ["authentication.k8s.io"], "resources": ["userextras/scopes"], "verbs": ["impersonate"]}`, wantProblem: "grants impersonation without resourceNames"},
		{name: "the bare userextras resource", rule: `{"apiGroups": ["authentication.k8s.io"], "resources": ["userextras"], "verbs": ["impersonate"]}`, wantProblem: "grants impersonation without resourceNames"},
		{name: "any resource's subresource covers userextras/<key>", rule: `{"apiGroups": ["authentication.k8s.io"], "resources": ["*/scopes"], "verbs": ["impersonate"]}`, wantProblem: "grants impersonation without resourceNames"},
		{name: "the core group has no userextras", rule: `{"apiGroups": [""], "resources": ["*/scopes", "uids", "nodes"], "verbs": ["impersonate"]}`},
		{name: "constrained impersonation of a serviceaccount", rule: `{"apiGroups": ["authentication.k8s.io"], "resources": ["serviceaccounts"], "verbs": ["impersonate:serviceaccount"]}`, wantProblem: "grants impersonation without resourceNames"},
		{name: "constrained impersonation of any node", rule: `{"apiGroups": ["authentication.k8s.io"], "resources": ["nodes"], "verbs": ["impersonate:arbitrary-node"]}`, wantProblem: "grants impersonation without resourceNames"},
		{name: "star verbs on every resource of the core group", rule: `{"apiGroups": [""], "resources": ["*"], "verbs": ["*"]}`, wantProblem: "grants impersonation without resourceNames"},
		{name: "star group covers authentication.k8s.io", rule: `{"apiGroups": ["*"], "resources": ["uids"], "verbs": ["impersonate"]}`, wantProblem: "grants impersonation without resourceNames"},
		{name: "impersonation verbs are case-sensitive", rule: `{"apiGroups": [""], "resources": ["users"], "verbs": ["Impersonate"]}`},
		{name: "impersonate-on on configmaps", rule: `{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["impersonate-on:serviceaccount:get"]}`, wantProblem: "grants impersonate-on without resourceNames"},
		{name: "impersonate-on on configmaps naming them", rule: `{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["impersonate-on:serviceaccount:get"], "resourceNames": ["app-config"]}`},
		{name: "impersonate-on on discovery", rule: `{"nonResourceURLs": ["/api", "/apis"], "verbs": ["impersonate-on:serviceaccount:get"]}`, wantProblem: "grants impersonate-on on nonResourceURLs, which cannot have resourceNames"},
		{name: "impersonating serviceaccounts by name", rule: `{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"], "resourceNames": ["deployer"]}`},
		{
			name:        "star in resourceNames is the name asked for when many groups are impersonated at once",
			rule:        `{"apiGroups": ["authentication.k8s.io"], "resources": ["groups"], "verbs": ["impersonate:user-info"], "resourceNames": ["*"]}`,
			wantProblem: `grants impersonation of resourceNames "*", the name kube-apiserver asks for when many groups or extras are impersonated at once`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := rbacReview(t, "clusterroles", "CREATE", clusterRoleJSON("r", "", `[`+tt.rule+`]`), "")
			resp := NewImpersonationRBACValidator("Warn").Handle(t.Context(), req)
			if !resp.Allowed {
				t.Fatalf("Warn mode denied: %+v", resp.Result)
			}
			switch {
			case tt.wantProblem == "" && len(resp.Warnings) > 0:
				t.Errorf("the rule is a finding, want none: %q", resp.Warnings)
			case tt.wantProblem != "" && len(resp.Warnings) != 1:
				t.Errorf("warnings %q, want one", resp.Warnings)
			case tt.wantProblem != "" && !strings.Contains(resp.Warnings[0], " "+tt.wantProblem+"): "):
				t.Errorf("warning %q does not say %q", resp.Warnings[0], tt.wantProblem)
			}
		})
	}
}

// recordingHandler answers with a fixed message and counts its calls.
type recordingHandler struct {
	name  string
	calls int
}

func (h *recordingHandler) Handle(context.Context, admission.Request) admission.Response {
	h.calls++
	return admission.Denied(h.name)
}

func TestValidatorRoutesByResource(t *testing.T) {
	tests := []struct {
		name     string
		group    string
		resource string
		want     string // the handler that answers; "" = allowed by the router
	}{
		{name: "argoproj.io appprojects go to the AppProject validator", group: "argoproj.io", resource: "appprojects", want: "appprojects"},
		{name: "deputy.dev appprojects go to the AppProject validator", group: "deputy.dev", resource: "appprojects", want: "appprojects"},
		{name: "roles go to the RBAC validator", group: "rbac.authorization.k8s.io", resource: "roles", want: "rbac"},
		{name: "clusterroles go to the RBAC validator", group: "rbac.authorization.k8s.io", resource: "clusterroles", want: "rbac"},
		{name: "rolebindings are allowed", group: "rbac.authorization.k8s.io", resource: "rolebindings"},
		{name: "appprojects of another group are allowed", group: "example.com", resource: "appprojects"},
		{name: "roles of another group are allowed", group: "example.com", resource: "roles"},
		{name: "pods are allowed", group: "", resource: "pods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			projects, rbac := &recordingHandler{name: "appprojects"}, &recordingHandler{name: "rbac"}
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID:       "u",
				Resource:  metav1.GroupVersionResource{Group: tt.group, Version: "v1", Resource: tt.resource},
				Operation: admissionv1.Create,
			}}
			resp := NewValidator(projects, rbac).Handle(t.Context(), req)
			got := ""
			if !resp.Allowed {
				got = resp.Result.Message
			}
			if got != tt.want {
				t.Errorf("answered by %q, want %q", got, tt.want)
			}
			if projects.calls+rbac.calls > 1 {
				t.Errorf("%d handlers called, want at most one", projects.calls+rbac.calls)
			}
		})
	}
}

// TestValidateServesRolesAndAppProjects sends AdmissionReviews through the
// /validate handler as run.go builds it: a role's warnings and an
// AppProject's denial both reach kube-apiserver.
func TestValidateServesRolesAndAppProjects(t *testing.T) {
	h := quietValidateHandler(NewValidator(NewAppProjectValidator(true), NewImpersonationRBACValidator("Warn")), NewMetrics())
	post := func(t *testing.T, review string) admissionv1.AdmissionReview {
		t.Helper()
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/validate", strings.NewReader(review))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		if out.Response == nil {
			t.Fatalf("no response: %s", rec.Body)
		}
		return out
	}
	review := func(group, version, resource, object string) string {
		return fmt.Sprintf(`{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
			"uid": "u-1", "kind": {"group": %[1]q, "version": %[2]q, "kind": "X"},
			"resource": {"group": %[1]q, "version": %[2]q, "resource": %[3]q},
			"name": "x", "operation": "CREATE", "userInfo": {"username": "alice"}, "object": %[4]s}}`, group, version, resource, object)
	}

	t.Run("a ClusterRole granting broad impersonation is allowed with a warning", func(t *testing.T) {
		out := post(t, review("rbac.authorization.k8s.io", "v1", "clusterroles", clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`]`)))
		if !out.Response.Allowed || out.Response.UID != "u-1" || len(out.Response.Warnings) != 1 {
			t.Errorf("response %+v, want allowed with uid u-1 and one warning", out.Response)
		}
	})
	t.Run("an invalid AppProject is still denied", func(t *testing.T) {
		out := post(t, review("deputy.dev", "v1alpha1", "appprojects", appProjectJSON("deputy.dev", appProjectStarSASpec)))
		if out.Response.Allowed || out.Response.Result == nil || out.Response.Result.Code != http.StatusUnprocessableEntity {
			t.Errorf("response %+v, want denied with 422", out.Response)
		}
	})
}

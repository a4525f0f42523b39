package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// appProjectReview builds an admission.Request the way the transport decodes
// it from an AdmissionReview v1 body.
func appProjectReview(t *testing.T, group, resource, subresource, operation, object string) admission.Request {
	t.Helper()
	if object == "" {
		object = "null"
	}
	body := fmt.Sprintf(`{
		"apiVersion": "admission.k8s.io/v1",
		"kind": "AdmissionReview",
		"request": {
			"uid": "0b8d6a6c-5c1d-4a3e-9d52-1c7c2a1f0001",
			"kind": {"group": %[1]q, "version": "v1alpha1", "kind": "AppProject"},
			"resource": {"group": %[1]q, "version": "v1alpha1", "resource": %[2]q},
			"subResource": %[3]q,
			"name": "guestbook",
			"namespace": "argocd",
			"operation": %[4]q,
			"userInfo": {"username": "alice"},
			"object": %[5]s
		}
	}`, group, resource, subresource, operation, object)
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal([]byte(body), &review); err != nil {
		t.Fatalf("test AdmissionReview does not decode: %v\n%s", err, body)
	}
	return admission.Request{AdmissionRequest: *review.Request}
}

func appProjectJSON(group, spec string) string {
	return fmt.Sprintf(`{
		"apiVersion": "%s/v1alpha1",
		"kind": "AppProject",
		"metadata": {"name": "guestbook", "namespace": "argocd"},
		"spec": %s
	}`, group, spec)
}

const (
	appProjectValidSpec = `{
		"sourceRepos": ["https://github.com/argoproj/argocd-example-apps.git"],
		"destinations": [{"server": "https://kubernetes.default.svc", "namespace": "guestbook-*"}],
		"destinationServiceAccounts": [
			{"server": "https://kubernetes.default.svc", "namespace": "guestbook-prod", "defaultServiceAccount": "prod-deployer"},
			{"server": "*", "namespace": "*", "defaultServiceAccount": "argocd:deployer"}
		]
	}`
	appProjectStarSASpec = `{
		"destinationServiceAccounts": [
			{"server": "https://kubernetes.default.svc", "namespace": "guestbook", "defaultServiceAccount": "*"}
		]
	}`
	appProjectShadowSpec = `{
		"destinationServiceAccounts": [
			{"server": "*", "namespace": "*", "defaultServiceAccount": "catch-all"},
			{"server": "https://kubernetes.default.svc", "namespace": "guestbook", "defaultServiceAccount": "guestbook"}
		]
	}`
	appProjectShadowWarning = `spec.destinationServiceAccounts[1] (server "https://kubernetes.default.svc", namespace "guestbook") can never be used: spec.destinationServiceAccounts[0] (server "*", namespace "*") matches every destination it matches and the first match wins; remove entry 1 or move it above entry 0`
)

func TestAppProjectValidator(t *testing.T) {
	tests := []struct {
		name         string
		lintWarnings bool
		request      func(t *testing.T) admission.Request
		wantAllowed  bool
		wantCode     int32
		wantReason   metav1.StatusReason
		wantMessage  string
		wantCauses   []metav1.StatusCause
		wantWarnings []string
	}{
		{
			name: "a valid argoproj.io AppProject with fields deputy does not model is allowed",
			request: func(t *testing.T) admission.Request {
				obj := `{
					"apiVersion": "argoproj.io/v1alpha1",
					"kind": "AppProject",
					"metadata": {"name": "guestbook", "namespace": "argocd", "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
					"spec": {
						"sourceRepos": ["*"],
						"destinations": [{"server": "*", "namespace": "*"}],
						"syncWindows": [{"kind": "allow", "schedule": "10 1 * * *", "duration": "1h", "applications": ["*"]}],
						"orphanedResources": {"warn": true},
						"permitOnlyProjectScopedClusters": false,
						"destinationServiceAccounts": [{"server": "*", "namespace": "*", "defaultServiceAccount": "deployer"}]
					},
					"status": {"jwtTokensByRole": {"ci": {"items": [{"iat": 1700000000, "id": "abc"}]}}}
				}`
				return appProjectReview(t, "argoproj.io", "appprojects", "", "CREATE", obj)
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "a valid deputy.dev AppProject is allowed",
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "deputy.dev", "appprojects", "", "CREATE", appProjectJSON("deputy.dev", appProjectValidSpec))
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "an argoproj.io AppProject with defaultServiceAccount star is denied as Invalid with upstream's message",
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "argoproj.io", "appprojects", "", "CREATE", appProjectJSON("argoproj.io", appProjectStarSASpec))
			},
			wantCode:    http.StatusUnprocessableEntity,
			wantReason:  metav1.StatusReasonInvalid,
			wantMessage: `AppProject.argoproj.io "guestbook" is invalid: spec.destinationServiceAccounts[0].defaultServiceAccount: Invalid value: "*": defaultServiceAccount has an invalid format, '*': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
			wantCauses: []metav1.StatusCause{{
				Type:    metav1.CauseTypeFieldValueInvalid,
				Message: `Invalid value: "*": defaultServiceAccount has an invalid format, '*': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
				Field:   "spec.destinationServiceAccounts[0].defaultServiceAccount",
			}},
		},
		{
			name: "an update of a deputy.dev AppProject is validated too and every error is listed",
			request: func(t *testing.T) admission.Request {
				spec := `{"destinationServiceAccounts": [
					{"server": "!https://kubernetes.default.svc", "namespace": "guestbook", "defaultServiceAccount": "*"},
					{"server": "*", "namespace": "*", "defaultServiceAccount": "a:b:c"}
				]}`
				return appProjectReview(t, "deputy.dev", "appprojects", "", "UPDATE", appProjectJSON("deputy.dev", spec))
			},
			wantCode:   http.StatusUnprocessableEntity,
			wantReason: metav1.StatusReasonInvalid,
			wantMessage: `AppProject.deputy.dev "guestbook" is invalid: [` +
				`spec.destinationServiceAccounts[0].server: Invalid value: "!https://kubernetes.default.svc": server has an invalid format, '!https://kubernetes.default.svc': destinationServiceAccounts do not support '!' negation; list the namespaces or use a glob such as team-*, ` +
				`spec.destinationServiceAccounts[0].defaultServiceAccount: Invalid value: "*": defaultServiceAccount has an invalid format, '*': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed, ` +
				`spec.destinationServiceAccounts[1].defaultServiceAccount: Invalid value: "a:b:c": has 2 colons: write "name" for a ServiceAccount in the Application's destination namespace, or "namespace:name" with exactly one colon]`,
			wantCauses: []metav1.StatusCause{
				{
					Type:    metav1.CauseTypeFieldValueInvalid,
					Message: `Invalid value: "!https://kubernetes.default.svc": server has an invalid format, '!https://kubernetes.default.svc': destinationServiceAccounts do not support '!' negation; list the namespaces or use a glob such as team-*`,
					Field:   "spec.destinationServiceAccounts[0].server",
				},
				{
					Type:    metav1.CauseTypeFieldValueInvalid,
					Message: `Invalid value: "*": defaultServiceAccount has an invalid format, '*': name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed`,
					Field:   "spec.destinationServiceAccounts[0].defaultServiceAccount",
				},
				{
					Type:    metav1.CauseTypeFieldValueInvalid,
					Message: `Invalid value: "a:b:c": has 2 colons: write "name" for a ServiceAccount in the Application's destination namespace, or "namespace:name" with exactly one colon`,
					Field:   "spec.destinationServiceAccounts[1].defaultServiceAccount",
				},
			},
		},
		{
			name:         "a shadowed entry is allowed with a warning naming both entries",
			lintWarnings: true,
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "argoproj.io", "appprojects", "", "CREATE", appProjectJSON("argoproj.io", appProjectShadowSpec))
			},
			wantAllowed:  true,
			wantCode:     http.StatusOK,
			wantWarnings: []string{appProjectShadowWarning},
		},
		{
			name: "a shadowed entry is allowed without a warning when lint warnings are off",
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "argoproj.io", "appprojects", "", "CREATE", appProjectJSON("argoproj.io", appProjectShadowSpec))
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name:         "a denied AppProject still carries its warnings",
			lintWarnings: true,
			request: func(t *testing.T) admission.Request {
				spec := `{"sourceRepos": ["!*"], "destinationServiceAccounts": [
					{"server": "*", "namespace": "*", "defaultServiceAccount": "catch-all"},
					{"server": "https://kubernetes.default.svc", "namespace": "guestbook", "defaultServiceAccount": "guestbook"}
				]}`
				return appProjectReview(t, "argoproj.io", "appprojects", "", "CREATE", appProjectJSON("argoproj.io", spec))
			},
			wantCode:    http.StatusUnprocessableEntity,
			wantReason:  metav1.StatusReasonInvalid,
			wantMessage: `AppProject.argoproj.io "guestbook" is invalid: spec.sourceRepos[0]: Invalid value: "!*": source repository has an invalid format, '!*'`,
			wantCauses: []metav1.StatusCause{{
				Type:    metav1.CauseTypeFieldValueInvalid,
				Message: `Invalid value: "!*": source repository has an invalid format, '!*'`,
				Field:   "spec.sourceRepos[0]",
			}},
			wantWarnings: []string{appProjectShadowWarning},
		},
		{
			name: "a DELETE is allowed without looking at the object",
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "deputy.dev", "appprojects", "", "DELETE", "")
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "an unknown field in a deputy.dev AppProject is denied naming the field's path",
			request: func(t *testing.T) admission.Request {
				spec := `{"destinationServiceAccounts": [
					{"server": "*", "namespace": "*", "defaultServiceAcount": "deployer"}
				]}`
				return appProjectReview(t, "deputy.dev", "appprojects", "", "CREATE", appProjectJSON("deputy.dev", spec))
			},
			wantCode:    http.StatusBadRequest,
			wantMessage: `strict decoding error: unknown field "spec.destinationServiceAccounts[0].defaultServiceAcount"`,
		},
		{
			name: "a repeated field in a deputy.dev AppProject is denied naming the field",
			request: func(t *testing.T) admission.Request {
				obj := `{"apiVersion": "deputy.dev/v1alpha1", "kind": "AppProject", "metadata": {"name": "guestbook"},
					"spec": {"sourceRepos": ["a"], "sourceRepos": ["b"]}}`
				return appProjectReview(t, "deputy.dev", "appprojects", "", "CREATE", obj)
			},
			wantCode:    http.StatusBadRequest,
			wantMessage: `strict decoding error: duplicate field "spec.sourceRepos"`,
		},
		{
			name: "an object that does not decode is denied with 400 and the decoding error",
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "argoproj.io", "appprojects", "", "CREATE", appProjectJSON("argoproj.io", `"not an object"`))
			},
			wantCode:    http.StatusBadRequest,
			wantMessage: `failed to decode AppProject: json: cannot unmarshal string into Go struct field AppProject.spec of type v1alpha1.AppProjectSpec`,
		},
		{
			name: "a CREATE without an object is denied with 400",
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "deputy.dev", "appprojects", "", "CREATE", "")
			},
			wantCode:    http.StatusBadRequest,
			wantMessage: `failed to decode AppProject: the request has no object`,
		},
		{
			name: "another resource of the same group is allowed with no opinion",
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "argoproj.io", "applications", "", "CREATE", `{"spec": "anything"}`)
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "appprojects of another group are allowed with no opinion",
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "example.com", "appprojects", "", "CREATE", appProjectJSON("example.com", appProjectStarSASpec))
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
		{
			name: "a status subresource update is allowed with no opinion",
			request: func(t *testing.T) admission.Request {
				return appProjectReview(t, "argoproj.io", "appprojects", "status", "UPDATE", appProjectJSON("argoproj.io", appProjectStarSASpec))
			},
			wantAllowed: true,
			wantCode:    http.StatusOK,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := NewAppProjectValidator(tt.lintWarnings).Handle(t.Context(), tt.request(t))
			checkAdmissionResponse(t, resp, admissionWant{allowed: tt.wantAllowed, code: tt.wantCode, reason: tt.wantReason,
				message: tt.wantMessage, causes: tt.wantCauses, warnings: tt.wantWarnings}, func(d *metav1.StatusDetails) {
				if d.Kind != "AppProject" || d.Name != "guestbook" {
					t.Errorf("details kind, name = %q, %q; want AppProject, guestbook", d.Kind, d.Name)
				}
			})
		})
	}
}

// admissionWant is what a validating webhook's answer should be.
type admissionWant struct {
	allowed  bool
	code     int32
	reason   metav1.StatusReason
	message  string
	causes   []metav1.StatusCause
	warnings []string
}

// checkAdmissionResponse compares resp with want; checkDetails, called when
// the result has details, checks what they name.
func checkAdmissionResponse(t *testing.T, resp admission.Response, want admissionWant, checkDetails func(*metav1.StatusDetails)) {
	t.Helper()
	if resp.Allowed != want.allowed {
		t.Errorf("allowed = %v, want %v (result %+v)", resp.Allowed, want.allowed, resp.Result)
	}
	if resp.Result == nil {
		t.Fatal("response has no result")
	}
	if resp.Result.Code != want.code || resp.Result.Reason != want.reason {
		t.Errorf("code, reason = %d, %q; want %d, %q", resp.Result.Code, resp.Result.Reason, want.code, want.reason)
	}
	if resp.Result.Message != want.message {
		t.Errorf("message =\n%s\nwant\n%s", resp.Result.Message, want.message)
	}
	var causes []metav1.StatusCause
	if d := resp.Result.Details; d != nil {
		causes = d.Causes
		checkDetails(d)
	}
	if diff := cmp.Diff(want.causes, causes); diff != "" {
		t.Errorf("causes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.warnings, resp.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	if resp.Patch != nil || len(resp.Patches) > 0 || resp.PatchType != nil {
		t.Error("a validating webhook must not return a patch")
	}
}

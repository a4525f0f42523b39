package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	sigsjson "sigs.k8s.io/json"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// appProjectResource is the plural resource name of AppProjects in both groups.
const appProjectResource = "appprojects"

// NewAppProjectValidator returns the validating admission handler for
// AppProjects of argoproj.io and deputy.dev.
//
// For CREATE and UPDATE of appprojects (not their subresources) it decodes
// the request's object into deputy's AppProject type (argoproj.io objects
// leniently, since they are Argo CD's to accept, with a warning when
// policy.DecodeAppProject refuses a field deputy's gate cannot honour, such as
// permitOnlyProjectScopedClusters or a field Argo CD's schema lacks: the
// project then grants nothing through the gate; deputy.dev objects strictly,
// so an unknown or repeated field is reported with its path) and runs
// policy.ValidateAppProject, which applies Argo CD's
// ValidateProject rules and messages (argo-cd
// pkg/apis/application/v1alpha1/app_project_types.go) and deputy's stricter
// ones; Argo CD itself runs them only in its own API server, not at
// admission.
//
// Responses: invalid objects are denied with the Kubernetes Invalid status
// (422, reason Invalid, one cause per field error, message
// `AppProject.<group> "<name>" is invalid: [<field errors>]`, as
// kube-apiserver words it); objects that cannot be decoded, and deputy.dev
// objects with unknown fields, are denied with 400 and the decoding error
// ("strict decoding error: unknown field \"spec.x\"", as kube-apiserver words
// strict field validation failures). Valid objects are allowed. When
// lintWarnings is true, the validation warnings (destinationServiceAccounts
// entries that can never be used) ride on the response, allowed or denied.
// Every other resource and operation is allowed without an opinion.
func NewAppProjectValidator(lintWarnings bool) admission.Handler {
	return &appProjectValidator{lintWarnings: lintWarnings}
}

type appProjectValidator struct {
	lintWarnings bool
}

var _ admission.Handler = (*appProjectValidator)(nil)

// Handle implements admission.Handler.
func (v *appProjectValidator) Handle(_ context.Context, req admission.Request) admission.Response {
	group := req.Resource.Group
	if req.Resource.Resource != appProjectResource || req.SubResource != "" ||
		(group != v1alpha1.Group && group != v1alpha1.ArgoCDGroup) {
		return admission.Allowed("")
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}

	proj, err := appProjectDecode(req.Object.Raw, group == v1alpha1.Group)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	var refused []string
	if group == v1alpha1.ArgoCDGroup {
		// The object is Argo CD's to accept; deputy says whether its gate
		// will honour it (a field deputy cannot honour makes the project
		// grant nothing through deputy's impersonation gate).
		if _, err := policy.DecodeAppProject(group, req.Object.Raw); errors.Is(err, policy.ErrProjectRefused) {
			refused = append(refused, "deputy's impersonation gate will grant nothing through this AppProject: "+err.Error())
		}
	}

	errs, warnings := policy.ValidateAppProject(proj)
	warnings = append(refused, warnings...)
	if !v.lintWarnings {
		warnings = refused
	}
	if len(errs) == 0 {
		return admission.Allowed("").WithWarnings(warnings...)
	}
	name := proj.Name
	if name == "" {
		name = req.Name
	}
	status := apierrors.NewInvalid(schema.GroupKind{Group: group, Kind: v1alpha1.KindAppProject}, name, errs).Status()
	return admission.Response{
		AdmissionResponse: admissionv1.AdmissionResponse{
			Allowed: false,
			Result:  &status,
		},
	}.WithWarnings(warnings...)
}

// appProjectDecode decodes an AppProject the way kube-apiserver decodes JSON:
// case-sensitive field names, integers preserved. strict reports unknown and
// repeated fields with their paths (runtime.NewStrictDecodingError).
func appProjectDecode(raw []byte, strict bool) (*v1alpha1.AppProject, error) {
	if len(raw) == 0 {
		return nil, errors.New("failed to decode AppProject: the request has no object")
	}
	proj := &v1alpha1.AppProject{}
	if !strict {
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, proj); err != nil {
			return nil, fmt.Errorf("failed to decode AppProject: %w", err)
		}
		return proj, nil
	}
	strictErrs, err := sigsjson.UnmarshalStrict(raw, proj)
	if err != nil {
		return nil, fmt.Errorf("failed to decode AppProject: %w", err)
	}
	if len(strictErrs) > 0 {
		return nil, runtime.NewStrictDecodingError(strictErrs)
	}
	return proj, nil
}

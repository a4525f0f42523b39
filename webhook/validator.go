package webhook

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"deputy.dev/deputy/policy/v1alpha1"
)

// NewValidator returns the admission handler behind /validate: it routes a
// request by its resource (request.resource, the version the
// ValidatingWebhookConfiguration matched with matchPolicy Equivalent) to
// appProjects (appprojects of argoproj.io and deputy.dev, see
// NewAppProjectValidator) or to rbac (roles and clusterroles of
// rbac.authorization.k8s.io, see NewImpersonationRBACValidator), including
// their subresources, which the handlers decline themselves. Every other
// resource is allowed without an opinion. Both handlers must be non-nil.
func NewValidator(appProjects, rbac admission.Handler) admission.Handler {
	return &validator{appProjects: appProjects, rbac: rbac}
}

type validator struct {
	appProjects admission.Handler
	rbac        admission.Handler
}

var _ admission.Handler = (*validator)(nil)

// Handle implements admission.Handler.
func (v *validator) Handle(ctx context.Context, req admission.Request) admission.Response {
	group, resource := req.Resource.Group, req.Resource.Resource
	switch {
	case resource == appProjectResource && (group == v1alpha1.Group || group == v1alpha1.ArgoCDGroup):
		return v.appProjects.Handle(ctx, req)
	case group == rbacv1.GroupName && (resource == rolesResource || resource == clusterRolesResource):
		return v.rbac.Handle(ctx, req)
	}
	return admission.Allowed("")
}

package policy

import (
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The functions in this file port kube-apiserver's defaulting and validation of
// RBAC objects (pkg/apis/rbac/v1/defaults.go, pkg/apis/rbac/validation), so a
// policy file deputy accepts is one kube-apiserver would accept too. They are
// hand-written because that code lives in k8s.io/kubernetes, which the product
// must not import.

// defaultSubjects is SetDefaults_Subject: User and Group subjects get the
// rbac.authorization.k8s.io apiGroup when it is empty.
func defaultSubjects(subjects []rbacv1.Subject) {
	for i := range subjects {
		if subjects[i].APIGroup == "" && (subjects[i].Kind == rbacv1.UserKind || subjects[i].Kind == rbacv1.GroupKind) {
			subjects[i].APIGroup = rbacv1.GroupName
		}
	}
}

// defaultRoleRef is SetDefaults_RoleBinding / SetDefaults_ClusterRoleBinding.
func defaultRoleRef(ref *rbacv1.RoleRef) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
}

func validateRBACName(name string, fld *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fld, "name or generateName is required")}
	}
	var errs field.ErrorList
	for _, msg := range path.IsValidPathSegmentName(name) {
		errs = append(errs, field.Invalid(fld, name, msg))
	}
	return errs
}

func validateNamespaceName(ns string, required bool, fld *field.Path) field.ErrorList {
	if ns == "" {
		if required {
			return field.ErrorList{field.Required(fld, "a namespaced object needs metadata.namespace")}
		}
		return nil
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(ns) {
		errs = append(errs, field.Invalid(fld, ns, msg))
	}
	return errs
}

func validatePolicyRules(rules []rbacv1.PolicyRule, namespaced bool, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, rule := range rules {
		p := fld.Index(i)
		if len(rule.Verbs) == 0 {
			errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(rule.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(rule.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(rule.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

func validateRoleRef(ref rbacv1.RoleRef, kinds []string) field.ErrorList {
	var errs field.ErrorList
	fld := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(fld.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	supported := false
	for _, k := range kinds {
		supported = supported || ref.Kind == k
	}
	if !supported {
		errs = append(errs, field.NotSupported(fld.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(fld.Child("name"), ""))
	} else {
		for _, msg := range path.IsValidPathSegmentName(ref.Name) {
			errs = append(errs, field.Invalid(fld.Child("name"), ref.Name, msg))
		}
	}
	return errs
}

// validateSubjects is ValidateRoleBindingSubject; namespaced is true for
// RoleBindings (a ServiceAccount subject there defaults to the binding's
// namespace) and false for ClusterRoleBindings (where it is required).
func validateSubjects(subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	fld := field.NewPath("subjects")
	for i, s := range subjects {
		p := fld.Index(i)
		if s.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if s.Name != "" {
				for _, msg := range validation.IsDNS1123Subdomain(s.Name) {
					errs = append(errs, field.Invalid(p.Child("name"), s.Name, msg))
				}
			}
			if s.APIGroup != "" {
				errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
			}
			if !namespaced && s.Namespace == "" {
				errs = append(errs, field.Required(p.Child("namespace"), "a ServiceAccount subject of a ClusterRoleBinding needs its namespace"))
			}
		case rbacv1.UserKind, rbacv1.GroupKind:
			if s.APIGroup != rbacv1.GroupName {
				errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
		}
	}
	return errs
}

func validateRole(r *rbacv1.Role) field.ErrorList {
	errs := validateRBACName(r.Name, field.NewPath("metadata", "name"))
	errs = append(errs, validateNamespaceName(r.Namespace, true, field.NewPath("metadata", "namespace"))...)
	return append(errs, validatePolicyRules(r.Rules, true, field.NewPath("rules"))...)
}

func validateClusterRole(r *rbacv1.ClusterRole) field.ErrorList {
	errs := validateRBACName(r.Name, field.NewPath("metadata", "name"))
	errs = append(errs, validatePolicyRules(r.Rules, false, field.NewPath("rules"))...)
	if r.AggregationRule != nil && len(r.AggregationRule.ClusterRoleSelectors) == 0 {
		errs = append(errs, field.Required(field.NewPath("aggregationRule", "clusterRoleSelectors"), "at least one clusterRoleSelector required if aggregationRule is non-nil"))
	}
	return errs
}

func validateRoleBinding(b *rbacv1.RoleBinding) field.ErrorList {
	errs := validateRBACName(b.Name, field.NewPath("metadata", "name"))
	errs = append(errs, validateNamespaceName(b.Namespace, true, field.NewPath("metadata", "namespace"))...)
	errs = append(errs, validateRoleRef(b.RoleRef, []string{"Role", "ClusterRole"})...)
	return append(errs, validateSubjects(b.Subjects, true)...)
}

func validateClusterRoleBinding(b *rbacv1.ClusterRoleBinding) field.ErrorList {
	errs := validateRBACName(b.Name, field.NewPath("metadata", "name"))
	errs = append(errs, validateRoleRef(b.RoleRef, []string{"ClusterRole"})...)
	return append(errs, validateSubjects(b.Subjects, false)...)
}

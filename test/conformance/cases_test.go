package conformance

import (
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// namedCase is a regression case with the answers written out: RBAC
// behaviour that is easy to get wrong. Cases whose objects kube-apiserver
// accepts also run against the real apiserver (TestAPIServerConformance),
// with their own users and groups so that no generated binding interferes.
type namedCase struct {
	name string
	// apiserver: kube-apiserver's validation accepts the objects.
	apiserver bool
	policy    *Policy
	checks    []namedCheck
}

type namedCheck struct {
	req     Request
	allowed bool
	// reason is the exact allow reason.
	reason string
	// evaluationError is deputy's exact evaluation error for a request
	// nothing allows ("" for none); the reason is then "RBAC: " + it.
	evaluationError string
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func clusterRoleBinding(name, role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: subjects}
}

func roleBinding(namespace, name, kind, role string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role}, Subjects: subjects}
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

func groupSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

func saSubject(namespace, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}
}

func resourceRule(verbs, groups, resources []string, names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
}

func l(s ...string) []string { return s }

// resourceRequest asks verb on group/resource[/subresource] name in namespace.
func resourceRequest(user string, groups []string, verb, group, resource, subresource, namespace, name string) Request {
	return Request{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource,
			Subresource: subresource, Namespace: namespace, Name: name}}}
}

func pathRequest(user string, groups []string, verb, path string) Request {
	return Request{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: verb, Path: path}}}
}

func allowedBy(req Request, reason string) namedCheck {
	return namedCheck{req: req, allowed: true, reason: reason}
}
func notAllowed(req Request) namedCheck { return namedCheck{req: req} }

func crbReason(binding, role, subject string) string {
	return fmt.Sprintf("RBAC: allowed by ClusterRoleBinding %q of ClusterRole %q to %s", binding, role, subject)
}

func withVersion(req Request, version string, v1beta1 bool) Request {
	ra := *req.Spec.ResourceAttributes
	ra.Version = version
	req.Spec.ResourceAttributes = &ra
	req.V1beta1 = v1beta1
	return req
}

// namedCases are the regression cases the issue names (#3), plus the
// contrasts that make each one meaningful.
func namedCases() []namedCase {
	const ns = "team-a"
	var cases []namedCase

	{
		u := "case-pods-star-user"
		reason := crbReason("case-pods-star", "case-pods-star", `User "`+u+`"`)
		cases = append(cases, namedCase{
			name: "pods/* is literal: it matches the subresource named * only", apiserver: true,
			policy: &Policy{
				ClusterRoles:        []*rbacv1.ClusterRole{clusterRole("case-pods-star", resourceRule(l("get"), l(""), l("pods/*")))},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{clusterRoleBinding("case-pods-star", "case-pods-star", userSubject(u))},
			},
			checks: []namedCheck{
				notAllowed(resourceRequest(u, nil, "get", "", "pods", "log", ns, "web")),
				notAllowed(resourceRequest(u, nil, "get", "", "pods", "status", "", "")),
				notAllowed(resourceRequest(u, nil, "get", "", "pods", "", ns, "web")),
				allowedBy(resourceRequest(u, nil, "get", "", "pods", "*", ns, "web"), reason),
			},
		})
	}
	{
		u := "case-scale-user"
		reason := crbReason("case-scale", "case-scale", `User "`+u+`"`)
		cases = append(cases, namedCase{
			name: "*/scale matches the scale subresource of any resource, not the resource", apiserver: true,
			policy: &Policy{
				ClusterRoles:        []*rbacv1.ClusterRole{clusterRole("case-scale", resourceRule(l("get", "update"), l("apps", ""), l("*/scale")))},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{clusterRoleBinding("case-scale", "case-scale", userSubject(u))},
			},
			checks: []namedCheck{
				allowedBy(resourceRequest(u, nil, "update", "apps", "deployments", "scale", ns, "web"), reason),
				allowedBy(resourceRequest(u, nil, "update", "apps", "statefulsets", "scale", ns, "db"), reason),
				allowedBy(resourceRequest(u, nil, "get", "", "replicationcontrollers", "scale", ns, ""), reason),
				notAllowed(resourceRequest(u, nil, "update", "apps", "deployments", "", ns, "web")),
				notAllowed(resourceRequest(u, nil, "update", "apps", "deployments", "status", ns, "web")),
				notAllowed(resourceRequest(u, nil, "update", "batch", "jobs", "scale", ns, "web")),
			},
		})
	}
	{
		u := "case-api-star-user"
		reason := crbReason("case-api-star", "case-api-star", `User "`+u+`"`)
		cases = append(cases, namedCase{
			name: "/api* is a prefix: it matches /apis", apiserver: true,
			policy: &Policy{
				ClusterRoles:        []*rbacv1.ClusterRole{clusterRole("case-api-star", rbacv1.PolicyRule{Verbs: l("get"), NonResourceURLs: l("/api*")})},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{clusterRoleBinding("case-api-star", "case-api-star", userSubject(u))},
			},
			checks: []namedCheck{
				allowedBy(pathRequest(u, nil, "get", "/apis"), reason),
				allowedBy(pathRequest(u, nil, "get", "/api"), reason),
				allowedBy(pathRequest(u, nil, "get", "/api/v1"), reason),
				allowedBy(pathRequest(u, nil, "get", "/apis/apps/v1"), reason),
				notAllowed(pathRequest(u, nil, "get", "/ap")),
				notAllowed(pathRequest(u, nil, "post", "/apis")),
				notAllowed(pathRequest(u, nil, "get", "/healthz")),
			},
		})
	}
	{
		// kube-apiserver rejects this binding (subjects[0].namespace:
		// Required value), so it runs in process only.
		cases = append(cases, namedCase{
			name: "a ServiceAccount subject without namespace in a ClusterRoleBinding never matches",
			policy: &Policy{
				ClusterRoles:        []*rbacv1.ClusterRole{clusterRole("case-sa", resourceRule(l("get"), l(""), l("pods")))},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{clusterRoleBinding("case-sa-no-namespace", "case-sa", saSubject("", "case-builder"))},
			},
			checks: []namedCheck{
				notAllowed(resourceRequest("system:serviceaccount:team-a:case-builder", l("system:serviceaccounts", "system:serviceaccounts:team-a"), "get", "", "pods", "", ns, "")),
				notAllowed(resourceRequest("system:serviceaccount:team-a:case-builder", nil, "get", "", "pods", "", "", "")),
				notAllowed(resourceRequest("system:serviceaccount::case-builder", nil, "get", "", "pods", "", "", "")),
				notAllowed(resourceRequest("case-builder", nil, "get", "", "pods", "", ns, "")),
			},
		})
	}
	{
		sa := "system:serviceaccount:team-a:case-deployer"
		cases = append(cases, namedCase{
			name: "a ServiceAccount subject without namespace in a RoleBinding is the binding's namespace's", apiserver: true,
			policy: &Policy{
				Namespaces:          l(ns, "team-b"),
				ClusterRoles:        []*rbacv1.ClusterRole{clusterRole("case-sa-rb", resourceRule(l("get"), l(""), l("pods")))},
				RoleBindings:        []*rbacv1.RoleBinding{roleBinding(ns, "case-sa-rb", "ClusterRole", "case-sa-rb", saSubject("", "case-deployer"))},
				ClusterRoleBindings: nil,
			},
			checks: []namedCheck{
				allowedBy(resourceRequest(sa, nil, "get", "", "pods", "", ns, "web"),
					`RBAC: allowed by RoleBinding "case-sa-rb/team-a" of ClusterRole "case-sa-rb" to ServiceAccount "case-deployer/team-a"`),
				notAllowed(resourceRequest(sa, nil, "get", "", "pods", "", "team-b", "web")),
				notAllowed(resourceRequest("system:serviceaccount:team-b:case-deployer", nil, "get", "", "pods", "", ns, "web")),
				notAllowed(resourceRequest(sa, nil, "get", "", "pods", "", "", "")),
			},
		})
	}
	{
		u := "case-verb-user"
		cases = append(cases, namedCase{
			name: "a SubjectAccessReview whose verb is * is allowed only by rules with verb *", apiserver: true,
			policy: &Policy{
				ClusterRoles: []*rbacv1.ClusterRole{
					clusterRole("case-verb-some", resourceRule(l("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"), l(""), l("pods"))),
					clusterRole("case-verb-all", resourceRule(l("*"), l(""), l("configmaps"))),
				},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
					clusterRoleBinding("case-verb-some", "case-verb-some", userSubject(u)),
					clusterRoleBinding("case-verb-all", "case-verb-all", userSubject(u)),
				},
			},
			checks: []namedCheck{
				notAllowed(resourceRequest(u, nil, "*", "", "pods", "", ns, "")),
				allowedBy(resourceRequest(u, nil, "get", "", "pods", "", ns, ""), crbReason("case-verb-some", "case-verb-some", `User "`+u+`"`)),
				allowedBy(resourceRequest(u, nil, "*", "", "configmaps", "", ns, ""), crbReason("case-verb-all", "case-verb-all", `User "`+u+`"`)),
				notAllowed(pathRequest(u, nil, "*", "/healthz")),
			},
		})
	}
	{
		u := "case-names-user"
		named := crbReason("case-names", "case-names", `User "`+u+`"`)
		unnamed := crbReason("case-no-names", "case-no-names", `User "`+u+`"`)
		cases = append(cases, namedCase{
			name: "resourceNames never match the empty name of create and list; no resourceNames match every name", apiserver: true,
			policy: &Policy{
				ClusterRoles: []*rbacv1.ClusterRole{
					clusterRole("case-names", resourceRule(l("get", "list", "create", "delete"), l(""), l("configmaps"), "web")),
					clusterRole("case-no-names", resourceRule(l("create", "list"), l(""), l("secrets"))),
				},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
					clusterRoleBinding("case-names", "case-names", userSubject(u)),
					clusterRoleBinding("case-no-names", "case-no-names", userSubject(u)),
				},
			},
			checks: []namedCheck{
				notAllowed(resourceRequest(u, nil, "create", "", "configmaps", "", ns, "")),
				notAllowed(resourceRequest(u, nil, "list", "", "configmaps", "", ns, "")),
				notAllowed(resourceRequest(u, nil, "get", "", "configmaps", "", ns, "")),
				notAllowed(resourceRequest(u, nil, "get", "", "configmaps", "", ns, "Web")),
				allowedBy(resourceRequest(u, nil, "get", "", "configmaps", "", ns, "web"), named),
				allowedBy(resourceRequest(u, nil, "create", "", "configmaps", "", ns, "web"), named),
				allowedBy(resourceRequest(u, nil, "create", "", "secrets", "", ns, ""), unnamed),
				allowedBy(resourceRequest(u, nil, "list", "", "secrets", "", "", ""), unnamed),
				allowedBy(resourceRequest(u, nil, "create", "", "secrets", "", ns, "any"), unnamed),
			},
		})
	}
	{
		u := "case-missing-user"
		cases = append(cases, namedCase{
			name: "a missing role: allowed when another binding allows, else no opinion with the evaluation error", apiserver: true,
			policy: &Policy{
				Namespaces:   l(ns),
				ClusterRoles: []*rbacv1.ClusterRole{clusterRole("case-present", resourceRule(l("get"), l(""), l("pods")))},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
					clusterRoleBinding("case-missing", "case-missing-role", userSubject(u)),
					clusterRoleBinding("case-present", "case-present", userSubject(u)),
				},
				RoleBindings: []*rbacv1.RoleBinding{roleBinding(ns, "case-missing-rb", "Role", "case-missing-role", userSubject(u))},
			},
			checks: []namedCheck{
				allowedBy(resourceRequest(u, nil, "get", "", "pods", "", ns, "web"), crbReason("case-present", "case-present", `User "`+u+`"`)),
				{req: resourceRequest(u, nil, "delete", "", "pods", "", "", "web"),
					evaluationError: `clusterrole.rbac.authorization.k8s.io "case-missing-role" not found`},
				{req: resourceRequest(u, nil, "delete", "", "pods", "", ns, "web"),
					evaluationError: `[clusterrole.rbac.authorization.k8s.io "case-missing-role" not found, role.rbac.authorization.k8s.io "case-missing-role" not found]`},
				notAllowed(resourceRequest("case-someone-else", nil, "delete", "", "pods", "", ns, "web")),
			},
		})
	}
	{
		g := "case-v1beta1-group"
		reason := crbReason("case-group", "case-group", `Group "`+g+`"`)
		v1beta1 := func(r Request) Request { r.V1beta1 = true; return r }
		cases = append(cases, namedCase{
			name: "v1beta1 SubjectAccessReviews spell the groups field group", apiserver: true,
			policy: &Policy{
				ClusterRoles:        []*rbacv1.ClusterRole{clusterRole("case-group", resourceRule(l("get"), l(""), l("pods")))},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{clusterRoleBinding("case-group", "case-group", groupSubject(g))},
			},
			checks: []namedCheck{
				allowedBy(v1beta1(resourceRequest("case-nobody", l("case-dev", g), "get", "", "pods", "", ns, "")), reason),
				allowedBy(v1beta1(resourceRequest("", l(g), "get", "", "pods", "", ns, "")), reason),
				allowedBy(resourceRequest("case-nobody", l(g), "get", "", "pods", "", ns, ""), reason),
				notAllowed(v1beta1(resourceRequest("case-nobody", l("case-dev"), "get", "", "pods", "", ns, ""))),
			},
		})
	}
	{
		u := "case-version-user"
		reason := crbReason("case-version", "case-version", `User "`+u+`"`)
		base := resourceRequest(u, nil, "get", "apps", "deployments", "", ns, "web")
		c := namedCase{
			name: "the SubjectAccessReview version (* or empty) does not matter", apiserver: true,
			policy: &Policy{
				ClusterRoles:        []*rbacv1.ClusterRole{clusterRole("case-version", resourceRule(l("get"), l("apps"), l("deployments")))},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{clusterRoleBinding("case-version", "case-version", userSubject(u))},
			},
		}
		for _, v := range []string{"", "*", "v1", "v1beta1", "v9"} {
			for _, beta := range []bool{false, true} {
				c.checks = append(c.checks, allowedBy(withVersion(base, v, beta), reason))
			}
		}
		miss := withVersion(base, "*", false)
		miss.Spec.ResourceAttributes.Verb = "delete"
		c.checks = append(c.checks, notAllowed(miss))
		cases = append(cases, c)
	}
	return cases
}

// merge appends q's objects to p (namespaces once each).
func (p *Policy) merge(q *Policy) {
	for _, ns := range q.Namespaces {
		if !containsString(p.Namespaces, ns) {
			p.Namespaces = append(p.Namespaces, ns)
		}
	}
	p.ClusterRoles = append(p.ClusterRoles, q.ClusterRoles...)
	p.Roles = append(p.Roles, q.Roles...)
	p.ClusterRoleBindings = append(p.ClusterRoleBindings, q.ClusterRoleBindings...)
	p.RoleBindings = append(p.RoleBindings, q.RoleBindings...)
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

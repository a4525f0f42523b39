package authorizer

import (
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/policy"
)

// BootstrapGrant is one of the ClusterRoles, with its ClusterRoleBinding,
// that kube-apiserver creates at startup
// (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go) and that
// ordinary clients rely on. kube-apiserver's RBAC grants them anyway; a
// deputy policy with authorization.defaultDecision Deny must grant them too,
// since deputy's denial is final.
type BootstrapGrant struct {
	ClusterRole        rbacv1.ClusterRole
	ClusterRoleBinding rbacv1.ClusterRoleBinding
	// Purpose says what fails without the grant.
	Purpose string
}

// BootstrapFile is the example policy file holding the BootstrapGrants
// (examples/bootstrap.yaml, embedded in the default policy).
const BootstrapFile = "examples/bootstrap.yaml"

// bootstrapLabels and bootstrapAnnotations are upstream's metadata on every
// bootstrap object (bootstrappolicy.Label, bootstrappolicy.Annotation).
var (
	bootstrapLabels      = map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}
	bootstrapAnnotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"}
)

// BootstrapGrants returns, freshly allocated, kube-apiserver v1.37's
// system:discovery, system:basic-user and system:public-info-viewer
// ClusterRoles and ClusterRoleBindings, rules (in upstream's sorted order),
// subjects and metadata exactly as upstream's bootstrap policy has them
// (test/conformance checks this against k8s.io/kubernetes).
func BootstrapGrants() []BootstrapGrant {
	grant := func(name, purpose string, groups []string, rules ...rbacv1.PolicyRule) BootstrapGrant {
		meta := metav1.ObjectMeta{Name: name, Labels: copyMap(bootstrapLabels), Annotations: copyMap(bootstrapAnnotations)}
		g := BootstrapGrant{
			ClusterRole: rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
				ObjectMeta: meta, Rules: rules},
			ClusterRoleBinding: rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
				ObjectMeta: *meta.DeepCopy(), RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}},
			Purpose: purpose,
		}
		for _, grp := range groups {
			g.ClusterRoleBinding.Subjects = append(g.ClusterRoleBinding.Subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: grp})
		}
		return g
	}
	return []BootstrapGrant{
		grant("system:discovery", "API discovery, which every kubectl command and client library starts with",
			[]string{user.AllAuthenticated},
			rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{
				"/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"}}),
		grant("system:basic-user", "self reviews: kubectl auth can-i and auth whoami, and the SelfSubjectAccessReviews of deputy's sync preflight",
			[]string{user.AllAuthenticated},
			rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
			rbacv1.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}}),
		grant("system:public-info-viewer", "kube-apiserver's health and version endpoints for everyone, unauthenticated probes included",
			[]string{user.AllAuthenticated, user.AllUnauthenticated},
			rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/livez", "/readyz", "/version", "/version/"}}),
	}
}

// bootstrapGrants is BootstrapGrants for reading only.
var bootstrapGrants = BootstrapGrants()

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// MissingBootstrapGrant is a bootstrap grant a policy does not give, with
// the requests it denies.
type MissingBootstrapGrant struct {
	Grant BootstrapGrant
	// Denied are the grant's requests the policy does not allow, e.g.
	// `get /api for group system:authenticated`.
	Denied []string
}

// MissingBootstrapGrants checks snap against BootstrapGrants by what it
// allows, not by object names: for every rule of a grant, every verb and
// every URL or resource it lists is asked (as Authorize would be) for a
// user whose only group is each subject of the grant's binding (anonymous
// for system:unauthenticated); a grant with a denied request is missing. A
// policy that grants the same under other names passes. nil snap: nothing
// is checked.
func MissingBootstrapGrants(snap *policy.Snapshot) []MissingBootstrapGrant {
	if snap == nil {
		return nil
	}
	var out []MissingBootstrapGrant
	for _, g := range BootstrapGrants() {
		var denied []string
		for _, subj := range g.ClusterRoleBinding.Subjects {
			u := &user.DefaultInfo{Name: "deputy:bootstrap-probe", Groups: []string{subj.Name}}
			if subj.Name == user.AllUnauthenticated {
				u.Name = user.Anonymous
			}
			var what []string
			for _, attrs := range bootstrapProbes(u, g.ClusterRole.Rules) {
				if Explain(snap, attrs.AttributesRecord).Binding == nil {
					what = append(what, attrs.what)
				}
			}
			if len(what) > 0 {
				denied = append(denied, strings.Join(what, ", ")+" for group "+subj.Name)
			}
		}
		if len(denied) > 0 {
			out = append(out, MissingBootstrapGrant{Grant: g, Denied: denied})
		}
	}
	return out
}

type probe struct {
	*authorizer.AttributesRecord
	what string
}

// bootstrapProbes are one request per verb and URL or (group, resource) of
// rules; a URL ending in * is asked with "v1" in its place.
func bootstrapProbes(u user.Info, rules []rbacv1.PolicyRule) []probe {
	var out []probe
	for _, r := range rules {
		for _, verb := range r.Verbs {
			for _, url := range r.NonResourceURLs {
				path := strings.TrimSuffix(url, "*")
				if path != url {
					path += "v1"
				}
				out = append(out, probe{&authorizer.AttributesRecord{User: u, Verb: verb, Path: path}, verb + " " + url})
			}
			for _, group := range r.APIGroups {
				for _, res := range r.Resources {
					out = append(out, probe{&authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, APIVersion: "*", Resource: res, ResourceRequest: true},
						verb + " " + resourceString(group, res)})
				}
			}
		}
	}
	return out
}

// bootstrapHint names the bootstrap grant that would allow a for its user's
// groups, and says that a Deny policy must keep it; "" when none would.
func bootstrapHint(a authorizer.Attributes) string {
	groups := a.GetUser().GetGroups()
	for _, g := range bootstrapGrants {
		var group string
		for _, s := range g.ClusterRoleBinding.Subjects {
			for _, ug := range groups {
				if s.Name == ug && group == "" {
					group = ug
				}
			}
		}
		if group == "" {
			continue
		}
		for i := range g.ClusterRole.Rules {
			if ruleAllows(a, &g.ClusterRole.Rules[i]) {
				return fmt.Sprintf("kube-apiserver's bootstrap ClusterRole %q, bound to group %s, allows this (%s): "+
					"a policy with authorization.defaultDecision Deny must keep it, see %s", g.ClusterRole.Name, group, g.Purpose, BootstrapFile)
			}
		}
	}
	return ""
}

func resourceString(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

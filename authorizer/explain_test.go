package authorizer_test

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
	"sigs.k8s.io/yaml"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/examples"
	"deputy.dev/deputy/policy"
)

// explainSnapshot: alice reads pods in team-a (RoleBinding) and may patch the
// ConfigMap "settings" there; group devs may get /logs and create
// deployments in team-a; everyone authenticated has the bootstrap grants;
// bob's only binding refers to a missing role.
func explainSnapshot(t *testing.T) *policy.Snapshot {
	t.Helper()
	objs := policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{
			rbacClusterRole("pod-reader", rbacRule("get", "list", "watch").Groups("").Resources("pods", "pods/log")),
			rbacClusterRole("log-reader", rbacRule("get").URLs("/logs", "/logs/*")),
			rbacClusterRole("deployer", rbacRule("create").Groups("apps").Resources("deployments")),
		},
		Roles: []*rbacv1.Role{rbacRole("team-a", "settings", rbacRule("patch").Groups("").Resources("configmaps").Names("settings"))},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
			rbacCRB("log-readers", "log-reader", rbacGroup("devs")),
			rbacCRB("broken", "nope", rbacUser("bob")),
		},
		RoleBindings: []*rbacv1.RoleBinding{
			rbacRB("team-a", "alice-pods", "ClusterRole", "pod-reader", rbacUser("alice")),
			rbacRB("team-a", "alice-settings", "Role", "settings", rbacUser("alice")),
			rbacRB("team-a", "deployers", "ClusterRole", "deployer", rbacGroup("devs")),
		},
	}
	for _, g := range deputyauthz.BootstrapGrants() {
		objs.ClusterRoles = append(objs.ClusterRoles, &g.ClusterRole)
		objs.ClusterRoleBindings = append(objs.ClusterRoleBindings, &g.ClusterRoleBinding)
	}
	r, err := policy.NewRBAC(objs, false)
	if err != nil {
		t.Fatal(err)
	}
	return &policy.Snapshot{RBAC: r}
}

func TestExplainDenial(t *testing.T) {
	snap := explainSnapshot(t)
	alice := rbacWho("alice", "devs", user.AllAuthenticated)
	const alicePods = `closest: RoleBinding "alice-pods/team-a" of ClusterRole "pod-reader" to User "alice" has {APIGroups:[""], Resources:["pods" "pods/log"], Verbs:["get" "list" "watch"]}, which lacks `
	tests := []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  string
	}{
		{
			name:  "a rule for the resource with another verb is the closest",
			attrs: rbacResource(alice, "delete", "", "pods", "", "team-a", "web"),
			want:  alicePods + `verb "delete"`,
		},
		{
			name:  "a subresource the rule does not list",
			attrs: rbacResource(alice, "get", "", "pods", "exec", "team-a", "web"),
			want:  alicePods + `resource "pods/exec"`,
		},
		{
			name:  "a name outside resourceNames",
			attrs: rbacResource(alice, "patch", "", "configmaps", "", "team-a", "other"),
			want:  `closest: RoleBinding "alice-settings/team-a" of Role "settings" to User "alice" has {APIGroups:[""], Resources:["configmaps"], ResourceNames:["settings"], Verbs:["patch"]}, which lacks resourceName "other"`,
		},
		{
			name:  "a request for every name against resourceNames",
			attrs: rbacResource(alice, "patch", "", "configmaps", "", "team-a", ""),
			want:  `closest: RoleBinding "alice-settings/team-a" of Role "settings" to User "alice" has {APIGroups:[""], Resources:["configmaps"], ResourceNames:["settings"], Verbs:["patch"]}, which lacks requests for every name (it lists resourceNames)`,
		},
		{
			name:  "several facets missing are all named",
			attrs: rbacResource(alice, "delete", "extensions", "deployments", "", "team-a", ""),
			want:  `closest: RoleBinding "deployers/team-a" of ClusterRole "deployer" to Group "devs" has {APIGroups:["apps"], Resources:["deployments"], Verbs:["create"]}, which lacks API group "extensions" and verb "delete"`,
		},
		{
			name:  "a URL the rule covers with another verb",
			attrs: rbacPath(alice, "post", "/logs/kube-apiserver.log"),
			want:  `closest: ClusterRoleBinding "log-readers" of ClusterRole "log-reader" to Group "devs" has {NonResourceURLs:["/logs" "/logs/*"], Verbs:["get"]}, which lacks verb "post"`,
		},
		{
			name:  "no rule about the resource: the policy's own bindings are named before the bootstrap grants",
			attrs: rbacResource(alice, "get", "", "secrets", "", "team-a", ""),
			want: `no rule of the 7 bindings that apply to User "alice" cluster-wide or in namespace "team-a" is about "secrets" (` +
				`ClusterRoleBinding "log-readers" of ClusterRole "log-reader" to Group "devs"; RoleBinding "alice-pods/team-a" of ClusterRole "pod-reader" to User "alice"; ` +
				`RoleBinding "alice-settings/team-a" of Role "settings" to User "alice" and 4 more)`,
		},
		{
			name:  "only bootstrap bindings apply",
			attrs: rbacResource(rbacWho("carol", user.AllAuthenticated), "get", "", "pods", "", "team-b", ""),
			want: `no rule of the 3 bindings that apply to User "carol" cluster-wide or in namespace "team-b" is about "pods" (` +
				`ClusterRoleBinding "system:discovery" of ClusterRole "system:discovery" to Group "system:authenticated"; ` +
				`ClusterRoleBinding "system:basic-user" of ClusterRole "system:basic-user" to Group "system:authenticated"; ` +
				`ClusterRoleBinding "system:public-info-viewer" of ClusterRole "system:public-info-viewer" to Group "system:authenticated")`,
		},
		{
			name:  "no binding applies: the user's groups are named, a few",
			attrs: rbacResource(rbacWho("dave", "g1", "g2", "g3", "g4", "g5", "g6"), "get", "", "pods", "", "", ""),
			want:  `no binding applies to User "dave" (groups ["g1" "g2" "g3" "g4" "g5"] and 1 more) cluster-wide`,
		},
		{
			name:  "no binding applies to a user without groups",
			attrs: rbacResource(rbacWho("erin"), "get", "", "pods", "", "", ""),
			want:  `no binding applies to User "erin" (no groups) cluster-wide`,
		},
		{
			name:  "only a binding to a missing role: the evaluation error says it all",
			attrs: rbacResource(rbacWho("bob"), "get", "", "pods", "", "", ""),
			want:  "",
		},
		{
			name:  "discovery denied names the bootstrap grant a Deny policy must keep",
			attrs: rbacPath(rbacWho("frank", user.AllAuthenticated), "get", "/apis/apps/v1"),
			want: `kube-apiserver's bootstrap ClusterRole "system:discovery", bound to group system:authenticated, allows this ` +
				`(API discovery, which every kubectl command and client library starts with): a policy with authorization.defaultDecision Deny must keep it, see examples/bootstrap.yaml`,
		},
		{
			name:  "an anonymous health probe names system:public-info-viewer",
			attrs: rbacPath(rbacWho(user.Anonymous, user.AllUnauthenticated), "get", "/readyz"),
			want: `kube-apiserver's bootstrap ClusterRole "system:public-info-viewer", bound to group system:unauthenticated, allows this ` +
				`(kube-apiserver's health and version endpoints for everyone, unauthenticated probes included): a policy with authorization.defaultDecision Deny must keep it, see examples/bootstrap.yaml`,
		},
		{
			name:  "a self review names system:basic-user",
			attrs: rbacResource(rbacWho("frank", user.AllAuthenticated), "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", ""),
			want: `kube-apiserver's bootstrap ClusterRole "system:basic-user", bound to group system:authenticated, allows this ` +
				`(self reviews: kubectl auth can-i and auth whoami, and the SelfSubjectAccessReviews of deputy's sync preflight): a policy with authorization.defaultDecision Deny must keep it, see examples/bootstrap.yaml`,
		},
		{
			name:  "no bootstrap hint for a user outside the grant's groups",
			attrs: rbacPath(rbacWho("grace"), "get", "/api"),
			want:  `no binding applies to User "grace" (no groups) cluster-wide`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The bootstrap grants of the snapshot must not hide the hints:
			// they are asked on a snapshot without them.
			s := snap
			if strings.HasPrefix(tc.want, "kube-apiserver's bootstrap") {
				s = &policy.Snapshot{}
			}
			if got := deputyauthz.ExplainDenial(s, &tc.attrs); got != tc.want {
				t.Errorf("ExplainDenial =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
	t.Run("without a snapshot there is nothing to say", func(t *testing.T) {
		attrs := rbacResource(alice, "delete", "", "pods", "", "team-a", "web")
		if got := deputyauthz.ExplainDenial(nil, &attrs); got != "" {
			t.Errorf("ExplainDenial(nil) = %q", got)
		}
	})
}

// With defaultDecision Deny the reason of a denial explains it as can-i does;
// allows and NoOpinion answers are untouched.
func TestNewDenyExplainsTheClosestBinding(t *testing.T) {
	snap := explainSnapshot(t)
	rbac := deputyauthz.NewRBAC(func() *policy.Snapshot { return snap })
	alice := rbacWho("alice", "devs", user.AllAuthenticated)
	deny, err := deputyauthz.New(deputyauthz.Options{Default: deputyauthz.DefaultDeny},
		union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: rbac})
	if err != nil {
		t.Fatal(err)
	}
	noOpinion, err := deputyauthz.New(deputyauthz.Options{}, union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: rbac})
	if err != nil {
		t.Fatal(err)
	}
	denied := rbacResource(alice, "delete", "", "pods", "", "team-a", "web")
	d, reason, err := deny.Authorize(t.Context(), &denied)
	want := `deputy: no policy rule allows this request; closest: RoleBinding "alice-pods/team-a" of ClusterRole "pod-reader" to User "alice" has {APIGroups:[""], Resources:["pods" "pods/log"], Verbs:["get" "list" "watch"]}, which lacks verb "delete"`
	if d != authorizer.DecisionDeny || reason != want || err != nil {
		t.Errorf("Deny: Authorize = %s, %q, %v\nwant Deny, %q", decisionName(d), reason, err, want)
	}
	if d, reason, _ := noOpinion.Authorize(t.Context(), &denied); d != authorizer.DecisionNoOpinion || reason != "" {
		t.Errorf("NoOpinion: Authorize = %s, %q; want NoOpinion without a reason, as kube-apiserver's RBAC", decisionName(d), reason)
	}
	allowed := rbacResource(alice, "get", "", "pods", "", "team-a", "web")
	if d, reason, _ := deny.Authorize(t.Context(), &allowed); d != authorizer.DecisionAllow || reason != `RBAC: allowed by RoleBinding "alice-pods/team-a" of ClusterRole "pod-reader" to User "alice"` {
		t.Errorf("an allow: Authorize = %s, %q", decisionName(d), reason)
	}
	discovery := rbacPath(rbacWho("frank", user.AllAuthenticated), "get", "/api")
	empty := &policy.Snapshot{}
	bare, err := deputyauthz.New(deputyauthz.Options{Default: deputyauthz.DefaultDeny},
		union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: deputyauthz.NewRBAC(func() *policy.Snapshot { return empty })})
	if err != nil {
		t.Fatal(err)
	}
	if _, reason, _ := bare.Authorize(t.Context(), &discovery); !strings.Contains(reason, `bootstrap ClusterRole "system:discovery"`) {
		t.Errorf("discovery denied by a policy without the bootstrap grants: reason %q does not name system:discovery", reason)
	}
}

// examples/bootstrap.yaml holds exactly BootstrapGrants (which
// test/conformance compares with kube-apiserver's bootstrap policy).
func TestBootstrapExampleMatchesBootstrapGrants(t *testing.T) {
	data, err := fs.ReadFile(examples.FS, "bootstrap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []any
	for i, doc := range strings.Split(string(data), "\n---\n") {
		var tm struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
		switch tm.Kind {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict([]byte(doc), &cr); err != nil {
				t.Fatalf("document %d: %v", i+1, err)
			}
			got = append(got, cr)
		case "ClusterRoleBinding":
			var crb rbacv1.ClusterRoleBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &crb); err != nil {
				t.Fatalf("document %d: %v", i+1, err)
			}
			got = append(got, crb)
		default:
			t.Fatalf("document %d: unexpected kind %q", i+1, tm.Kind)
		}
	}
	var want []any
	for _, g := range deputyauthz.BootstrapGrants() {
		want = append(want, g.ClusterRole, g.ClusterRoleBinding)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("examples/bootstrap.yaml differs from BootstrapGrants (-want +got):\n%s", diff)
	}
}

func TestMissingBootstrapGrants(t *testing.T) {
	snapOf := func(objs policy.RBACObjects) *policy.Snapshot {
		r, err := policy.NewRBAC(objs, false)
		if err != nil {
			t.Fatal(err)
		}
		return &policy.Snapshot{RBAC: r}
	}
	names := func(m []deputyauthz.MissingBootstrapGrant) string {
		var out []string
		for _, g := range m {
			out = append(out, fmt.Sprintf("%s: %s", g.Grant.ClusterRole.Name, strings.Join(g.Denied, "; ")))
		}
		return strings.Join(out, "\n")
	}
	all := policy.RBACObjects{}
	for _, g := range deputyauthz.BootstrapGrants() {
		all.ClusterRoles = append(all.ClusterRoles, &g.ClusterRole)
		all.ClusterRoleBindings = append(all.ClusterRoleBindings, &g.ClusterRoleBinding)
	}
	tests := []struct {
		name string
		snap *policy.Snapshot
		want string
	}{
		{
			name: "a policy without them misses all three, every request named",
			snap: snapOf(policy.RBACObjects{}),
			want: "system:discovery: get /api, get /api/*, get /apis, get /apis/*, get /healthz, get /livez, get /openapi, get /openapi/*, get /readyz, get /version, get /version/ for group system:authenticated\n" +
				"system:basic-user: create selfsubjectaccessreviews.authorization.k8s.io, create selfsubjectrulesreviews.authorization.k8s.io, create selfsubjectreviews.authentication.k8s.io for group system:authenticated\n" +
				"system:public-info-viewer: get /healthz, get /livez, get /readyz, get /version, get /version/ for group system:authenticated; get /healthz, get /livez, get /readyz, get /version, get /version/ for group system:unauthenticated",
		},
		{name: "the bootstrap grants themselves", snap: snapOf(all), want: ""},
		{
			name: "the same rules under other names count",
			snap: snapOf(policy.RBACObjects{
				ClusterRoles: []*rbacv1.ClusterRole{
					rbacClusterRole("everything-public", rbacRule("get").URLs("*")),
					rbacClusterRole("reviews", rbacRule("create").Groups("authorization.k8s.io", "authentication.k8s.io").Resources("*")),
				},
				ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{
					rbacCRB("public", "everything-public", rbacGroup(user.AllAuthenticated), rbacGroup(user.AllUnauthenticated)),
					rbacCRB("reviews", "reviews", rbacGroup(user.AllAuthenticated)),
				},
			}),
			want: "",
		},
		{
			name: "a grant bound only to some users is missing for everyone else",
			snap: func() *policy.Snapshot {
				objs := policy.RBACObjects{ClusterRoles: all.ClusterRoles}
				for _, b := range all.ClusterRoleBindings {
					b := b.DeepCopy()
					if b.Name == "system:public-info-viewer" {
						b.Subjects = b.Subjects[:1] // not system:unauthenticated
					}
					objs.ClusterRoleBindings = append(objs.ClusterRoleBindings, b)
				}
				return snapOf(objs)
			}(),
			want: "system:public-info-viewer: get /healthz, get /livez, get /readyz, get /version, get /version/ for group system:unauthenticated",
		},
		{
			name: "the embedded example policy has them",
			snap: func() *policy.Snapshot {
				src := policy.NewFileSource([]string{"."}, policy.FileSourceOptions{FS: examples.FS})
				if err := src.Load(); err != nil {
					t.Fatal(err)
				}
				return src.Current()
			}(),
			want: "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(deputyauthz.MissingBootstrapGrants(tc.snap)); got != tc.want {
				t.Errorf("MissingBootstrapGrants:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// DescribeRule (written without fmt, for the deny path) renders as
// fmt's %q of each list, the form rbacv1helpers.CompactString uses.
func TestDescribeRuleMatchesFmt(t *testing.T) {
	byFmt := func(r *rbacv1.PolicyRule) string {
		var parts []string
		for _, f := range []struct {
			name string
			list []string
		}{{"APIGroups", r.APIGroups}, {"Resources", r.Resources}, {"NonResourceURLs", r.NonResourceURLs}, {"ResourceNames", r.ResourceNames}, {"Verbs", r.Verbs}} {
			if len(f.list) > 0 {
				parts = append(parts, fmt.Sprintf("%s:%q", f.name, f.list))
			}
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	for _, r := range []rbacv1.PolicyRule{
		{},
		{Verbs: []string{"get"}, NonResourceURLs: []string{"/api/*", "/healthz"}},
		{Verbs: []string{"*"}, APIGroups: []string{"", "apps"}, Resources: []string{"pods", "*/scale"}, ResourceNames: []string{`we"ird`, "ünï\tcode", "\x00"}},
	} {
		if got, want := deputyauthz.DescribeRule(&r), byFmt(&r); got != want {
			t.Errorf("DescribeRule = %s, want %s", got, want)
		}
	}
}

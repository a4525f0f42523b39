package manifests

import (
	"context"
	"path/filepath"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/apis/apiserver/load"
	"k8s.io/apiserver/pkg/authentication/user"
	kauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"

	"deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

// webhookMatchers loads the generated AuthorizationConfiguration as
// kube-apiserver does and compiles each webhook's matchConditions with
// k8s.io/apiserver's CEL compiler for authorization matchConditions, into the
// matcher kube-apiserver's webhook authorizer evaluates
// (plugin/pkg/authorizer/webhook newWithBackoff), by webhook name.
func webhookMatchers(t *testing.T, opts APIServerOptions) map[string]*authorizationcel.CELMatcher {
	t.Helper()
	out := t.TempDir()
	opts.Dir = out
	if _, err := WriteFiles(out, mustFiles(t, opts)); err != nil {
		t.Fatal(err)
	}
	cfg, err := load.LoadFromFile(filepath.Join(out, AuthorizationConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	compiler := authorizationcel.NewDefaultCompiler()
	matchers := map[string]*authorizationcel.CELMatcher{}
	for _, a := range cfg.Authorizers {
		if a.Webhook == nil {
			continue
		}
		m := &authorizationcel.CELMatcher{AuthorizerType: "Webhook", AuthorizerName: a.Name}
		for _, c := range a.Webhook.MatchConditions {
			res, err := compiler.CompileCELExpression(&authorizationcel.SubjectAccessReviewMatchCondition{Expression: c.Expression})
			if err != nil {
				t.Fatalf("webhook %s: kube-apiserver's CEL compiler rejects %q: %v", a.Name, c.Expression, err)
			}
			m.CompilationResults = append(m.CompilationResults, res)
			m.UsesFieldSelector = m.UsesFieldSelector || res.UsesFieldSelector
			m.UsesLabelSelector = m.UsesLabelSelector || res.UsesLabelSelector
		}
		matchers[a.Name] = m
	}
	if len(matchers) != 2 {
		t.Fatalf("%d webhooks, want 2", len(matchers))
	}
	return matchers
}

// sarOf is the SubjectAccessReview kube-apiserver's webhook authorizer sends
// for attributes (plugin/pkg/authorizer/webhook Authorize).
func sarOf(a kauthorizer.Attributes) *authorizationv1.SubjectAccessReview {
	u := a.GetUser()
	r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: u.GetName(), Groups: u.GetGroups(), UID: u.GetUID()}}
	if a.IsResourceRequest() {
		r.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: a.GetNamespace(), Verb: a.GetVerb(), Group: a.GetAPIGroup(),
			Version: a.GetAPIVersion(), Resource: a.GetResource(), Subresource: a.GetSubresource(), Name: a.GetName()}
	} else {
		r.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: a.GetPath(), Verb: a.GetVerb()}
	}
	return r
}

func match(t *testing.T, m *authorizationcel.CELMatcher, a kauthorizer.Attributes) bool {
	t.Helper()
	ok, err := m.Eval(context.Background(), sarOf(a))
	if err != nil {
		t.Fatalf("webhook %s: matchConditions fail to evaluate for %+v: %v", m.AuthorizerName, a, err)
	}
	return ok
}

// TestImpersonationMatchConditionIsTheGate checks, over every combination of
// verb, API group, resource, subresource and request kind below, that the
// impersonation webhook receives exactly the checks deputy's gate decides,
// and the other webhook exactly the rest: a strict gate without any rule
// denies every impersonation check it claims and has no opinion on anything
// else.
func TestImpersonationMatchConditionIsTheGate(t *testing.T) {
	_, c := pki(t)
	matchers := webhookMatchers(t, validOptions(c))
	snapshot, err := policy.Build(&policy.Objects{}, true)
	if err != nil {
		t.Fatal(err)
	}
	gate := authorizer.NewGate(authorizer.GateOptions{Strict: true}, func() *policy.Snapshot { return snapshot }, nil)

	verbs := []string{"impersonate", "impersonate:serviceaccount", "impersonate:user-info", "impersonate:arbitrary-node", "impersonate:associated-node",
		"impersonate:unknown", "impersonate:", "impersonate-on:serviceaccount:get", "impersonate-on:user-info:list", "impersonate-on:arbitrary-node:create",
		"impersonate-on:associated-node:watch", "impersonate-on:unknown:get", "impersonate-on:serviceaccount:", "impersonate-on:serviceaccount:a:b",
		"impersonate-on:serviceaccount", "impersonate-on:", "get", "create", "impersonatex", "Impersonate", "IMPERSONATE:serviceaccount"}
	var attrs []kauthorizer.AttributesRecord
	u := &user.DefaultInfo{Name: "carol", Groups: []string{"team-c", user.AllAuthenticated}}
	for _, verb := range verbs {
		for _, group := range []string{"", "authentication.k8s.io", "batch"} {
			for _, resource := range []string{"users", "groups", "serviceaccounts", "uids", "userextras", "nodes", "pods", "jobs"} {
				for _, sub := range []string{"", "scopes", "token", "*"} {
					attrs = append(attrs, kauthorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, APIVersion: "v1", Resource: resource,
						Subresource: sub, Namespace: "team-c", Name: "target", ResourceRequest: true})
				}
			}
		}
		for _, p := range []string{"/api", "/healthz", "/livez"} {
			attrs = append(attrs, kauthorizer.AttributesRecord{User: u, Verb: verb, Path: p})
		}
	}
	claimed := 0
	for _, a := range attrs {
		decision, _, _ := gate.Authorize(context.Background(), a)
		gateDecides := decision == kauthorizer.DecisionDeny
		if !gateDecides && decision != kauthorizer.DecisionNoOpinion {
			t.Fatalf("gate answered %v for %+v", decision, a)
		}
		if gateDecides {
			claimed++
		}
		if got := match(t, matchers[ImpersonationAuthorizerName], a); got != gateDecides {
			t.Errorf("%s: matches %t, gate decides %t: verb %q group %q resource %q subresource %q path %q",
				ImpersonationAuthorizerName, got, gateDecides, a.Verb, a.APIGroup, a.Resource, a.Subresource, a.Path)
		}
		// The other webhook: the rest, but for the health paths, which never
		// go to deputy (TestMatchConditionsSendNothingThatMustNotWait).
		wantRest := !gateDecides && a.Path != "/healthz" && a.Path != "/livez"
		if got := match(t, matchers[AuthorizerName], a); got != wantRest {
			t.Errorf("%s: matches %t, want %t (gate decides %t): verb %q group %q resource %q subresource %q path %q",
				AuthorizerName, got, wantRest, gateDecides, a.Verb, a.APIGroup, a.Resource, a.Subresource, a.Path)
		}
	}
	if claimed < 100 || claimed == len(attrs) {
		t.Fatalf("the gate claims %d of %d combinations: the table does not exercise both sides", claimed, len(attrs))
	}
}

// TestMatchConditionsSendNothingThatMustNotWait walks kube-apiserver's
// requests that must never wait for deputy and some that must reach it, with
// the matchConditions compiled by kube-apiserver's CEL compiler.
func TestMatchConditionsSendNothingThatMustNotWait(t *testing.T) {
	_, c := pki(t)
	opts := validOptions(c)
	opts.ServiceAccount = "gitops/deputy"
	matchers := webhookMatchers(t, opts)
	who := func(name string, groups ...string) user.Info { return &user.DefaultInfo{Name: name, Groups: groups} }
	res := func(u user.Info, verb, group, resource, ns, name string) kauthorizer.AttributesRecord {
		return kauthorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, APIVersion: "v1", Resource: resource, Namespace: ns, Name: name, ResourceRequest: true}
	}
	path := func(u user.Info, verb, p string) kauthorizer.AttributesRecord {
		return kauthorizer.AttributesRecord{User: u, Verb: verb, Path: p}
	}
	anonymous := who(user.Anonymous, user.AllUnauthenticated)
	alice := who("alice", "team-a", user.AllAuthenticated)
	kubelet := who("system:node:worker-1", user.NodesGroup, user.AllAuthenticated)
	deputySA := who("system:serviceaccount:gitops:deputy", "system:serviceaccounts", "system:serviceaccounts:gitops", user.AllAuthenticated)
	otherDeputy := who("system:serviceaccount:deputy-system:deputy", "system:serviceaccounts", "system:serviceaccounts:deputy-system", user.AllAuthenticated)
	rsController := who("system:serviceaccount:kube-system:replicaset-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system", user.AllAuthenticated)
	admin := who("kubernetes-admin", user.SystemPrivilegedGroup, user.AllAuthenticated)
	noGroups := &user.DefaultInfo{Name: "bare"}

	type want struct{ impersonation, rest bool }
	tests := []struct {
		name string
		a    kauthorizer.AttributesRecord
		want want
	}{
		{"an anonymous /livez", path(anonymous, "get", "/livez"), want{}},
		{"an anonymous /readyz", path(anonymous, "get", "/readyz"), want{}},
		{"an anonymous /healthz", path(anonymous, "get", "/healthz"), want{}},
		{"an anonymous /version", path(anonymous, "get", "/version"), want{}},
		{"an anonymous /version/", path(anonymous, "get", "/version/"), want{}},
		{"a check of one readiness probe", path(alice, "get", "/readyz/etcd"), want{}},
		{"an anonymous /livezz (not a health path)", path(anonymous, "get", "/livezz"), want{rest: true}},
		{"an anonymous discovery /api", path(anonymous, "get", "/api"), want{rest: true}},
		{"alice reading pods", res(alice, "list", "", "pods", "team-a", ""), want{rest: true}},
		{"a user without groups", res(noGroups, "get", "", "pods", "team-a", "p"), want{rest: true}},
		{"alice impersonating a ServiceAccount (legacy)", res(alice, "impersonate", "", "serviceaccounts", "team-a", "deployer"), want{impersonation: true}},
		{"alice's constrained impersonation", res(alice, "impersonate:serviceaccount", "authentication.k8s.io", "serviceaccounts", "team-a", "deployer"), want{impersonation: true}},
		{"alice acting on /api while impersonating", path(alice, "impersonate-on:serviceaccount:get", "/api"), want{impersonation: true}},
		{"impersonation of a health path is still the gate's", path(anonymous, "impersonate-on:user-info:get", "/livez"), want{impersonation: true}},
		{"a kubelet reading its pods", res(kubelet, "list", "", "pods", "", ""), want{}},
		{"a kubelet's Lease", res(kubelet, "update", "coordination.k8s.io", "leases", "kube-node-lease", "worker-1"), want{}},
		{"a kubelet impersonating", res(kubelet, "impersonate", "", "users", "", "bob"), want{impersonation: true}},
		{"the controller manager", res(who("system:kube-controller-manager", user.AllAuthenticated), "list", "", "pods", "", ""), want{}},
		{"the scheduler", res(who("system:kube-scheduler", user.AllAuthenticated), "create", "", "pods", "team-a", "p"), want{}},
		{"kube-proxy", res(who("system:kube-proxy", user.AllAuthenticated), "watch", "discovery.k8s.io", "endpointslices", "", ""), want{}},
		{"kube-apiserver's loopback client", res(who("system:apiserver", user.AllAuthenticated, user.SystemPrivilegedGroup), "list", "", "pods", "", ""), want{}},
		{"kube-apiserver's identity outside system:masters", res(who("system:apiserver", user.AllAuthenticated), "list", "", "pods", "", ""), want{}},
		{"a controller with its kube-system ServiceAccount", res(rsController, "create", "", "pods", "team-a", ""), want{}},
		{"a kube-system ServiceAccount impersonating", res(rsController, "impersonate", "", "serviceaccounts", "team-a", "x"), want{impersonation: true}},
		{"deputy's ServiceAccount listing Roles", res(deputySA, "list", "rbac.authorization.k8s.io", "roles", "", ""), want{}},
		{"deputy's ServiceAccount renewing its Lease", res(deputySA, "update", "coordination.k8s.io", "leases", "gitops", "deputy-sync"), want{}},
		{"deputy's ServiceAccount impersonating for a sync", res(deputySA, "impersonate:serviceaccount", "authentication.k8s.io", "serviceaccounts", "team-a", "deployer"), want{impersonation: true}},
		{"another namespace's deputy ServiceAccount", res(otherDeputy, "list", "rbac.authorization.k8s.io", "roles", "", ""), want{rest: true}},
		{"system:masters", res(admin, "list", "", "pods", "", ""), want{}},
		{"system:masters impersonating", res(admin, "impersonate", "", "users", "", "alice"), want{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := want{match(t, matchers[ImpersonationAuthorizerName], tt.a), match(t, matchers[AuthorizerName], tt.a)}
			if got != tt.want {
				t.Errorf("sent to %s: %t, to %s: %t; want %t, %t", ImpersonationAuthorizerName, got.impersonation, AuthorizerName, got.rest,
					tt.want.impersonation, tt.want.rest)
			}
		})
	}
}

package replay

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/apis/apiserver/load"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/manifests"
)

// recorder is a Decider that allows what allow says (deny by default) and
// records every check as "user: check".
type recorder struct {
	allow func(a authorizer.Attributes) bool
	mu    sync.Mutex
	asked []string
}

func (r *recorder) Decide(_ context.Context, a authorizer.Attributes) Decision {
	r.mu.Lock()
	r.asked = append(r.asked, a.GetUser().GetName()+": "+describeCheck(a))
	r.mu.Unlock()
	ok := r.allow != nil && r.allow(a)
	return Decision{Allowed: ok, Reason: "fake", Deputy: true}
}

func allowing(checks ...string) *recorder {
	return &recorder{allow: func(a authorizer.Attributes) bool { return slices.Contains(checks, describeCheck(a)) }}
}

func impersonated(requestor *user.DefaultInfo, wanted *user.DefaultInfo, actual user.Info, req authorizer.AttributesRecord) *Request {
	req.User = actual
	return &Request{Attributes: req, Requestor: requestor, Wanted: wanted}
}

// TestImpersonationChecksAreKubeAPIServers asserts the exact checks, in
// order, that kube-apiserver 1.37 makes for impersonated requests
// (k8s.io/apiserver pkg/endpoints/filters/impersonation).
func TestImpersonationChecksAreKubeAPIServers(t *testing.T) {
	ann := &user.DefaultInfo{Name: "ann", Groups: []string{"system:authenticated"}}
	list := authorizer.AttributesRecord{Verb: "list", APIVersion: "v1", Resource: "configmaps", Namespace: "a", ResourceRequest: true}
	target := &user.DefaultInfo{Name: "target", Groups: []string{"g1", "system:authenticated"}}
	for _, tc := range []struct {
		name    string
		r       *Request
		d       *recorder
		allowed bool
		asked   []string
	}{{
		name: "a user with a group: constrained user-info refused, legacy allows, then the request as the target",
		r:    impersonated(ann, &user.DefaultInfo{Name: "target", Groups: []string{"g1"}}, target, list),
		d:    allowing("impersonate users named target", "impersonate groups named g1", "list configmaps in a"),
		asked: []string{"ann: impersonate-on:user-info:list configmaps in a", "ann: impersonate users named target", "ann: impersonate groups named g1",
			"target: list configmaps in a"},
		allowed: true,
	}, {
		name: "constrained user-info allowed: no legacy check",
		r:    impersonated(ann, &user.DefaultInfo{Name: "target", Groups: []string{"g1"}}, target, list),
		d: allowing("impersonate-on:user-info:list configmaps in a", "impersonate:user-info users.authentication.k8s.io named target",
			"impersonate:user-info groups.authentication.k8s.io named g1", "list configmaps in a"),
		asked: []string{"ann: impersonate-on:user-info:list configmaps in a", "ann: impersonate:user-info users.authentication.k8s.io named target",
			"ann: impersonate:user-info groups.authentication.k8s.io named g1", "target: list configmaps in a"},
		allowed: true,
	}, {
		name: "a ServiceAccount: serviceaccount mode then legacy, both refused: the request is not asked",
		r: impersonated(ann, &user.DefaultInfo{Name: "system:serviceaccount:a:sa"},
			&user.DefaultInfo{Name: "system:serviceaccount:a:sa", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:a", "system:authenticated"}}, list),
		d:     allowing("impersonate-on:serviceaccount:list configmaps in a", "list configmaps in a"),
		asked: []string{"ann: impersonate-on:serviceaccount:list configmaps in a", "ann: impersonate:serviceaccount serviceaccounts.authentication.k8s.io in a named sa", "ann: impersonate serviceaccounts in a named sa"},
	}, {
		name: "uid and extra are checked in authentication.k8s.io",
		r:    impersonated(ann, &user.DefaultInfo{Name: "target", UID: "u1", Extra: map[string][]string{"example.com/k": {"v"}}}, target, list),
		d:    allowing("impersonate users named target", "impersonate uids.authentication.k8s.io named u1", "impersonate userextras.authentication.k8s.io/example.com/k named v", "list configmaps in a"),
		asked: []string{"ann: impersonate-on:user-info:list configmaps in a", "ann: impersonate users named target", "ann: impersonate uids.authentication.k8s.io named u1",
			"ann: impersonate userextras.authentication.k8s.io/example.com/k named v", "target: list configmaps in a"},
		allowed: true,
	}, {
		name: "four groups: constrained mode tries the wildcard first",
		r:    impersonated(ann, &user.DefaultInfo{Name: "target", Groups: []string{"a", "b", "c", "d"}}, target, list),
		d: allowing("impersonate-on:user-info:list configmaps in a", "impersonate:user-info users.authentication.k8s.io named target",
			"impersonate:user-info groups.authentication.k8s.io named *", "list configmaps in a"),
		asked: []string{"ann: impersonate-on:user-info:list configmaps in a", "ann: impersonate:user-info users.authentication.k8s.io named target",
			"ann: impersonate:user-info groups.authentication.k8s.io named *", "target: list configmaps in a"},
		allowed: true,
	}, {
		name: "system:masters cannot be impersonated in constrained mode; legacy asks",
		r:    impersonated(ann, &user.DefaultInfo{Name: "target", Groups: []string{"system:masters"}}, target, list),
		d:    allowing("impersonate-on:user-info:list configmaps in a", "impersonate:user-info users.authentication.k8s.io named target"),
		asked: []string{"ann: impersonate-on:user-info:list configmaps in a", "ann: impersonate:user-info users.authentication.k8s.io named target",
			"ann: impersonate users named target"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			out := DecideRequest(t.Context(), tc.d, tc.r)
			if out.Allowed != tc.allowed {
				t.Errorf("allowed %t, want %t (%s)", out.Allowed, tc.allowed, out.Reason)
			}
			if !slices.Equal(tc.d.asked, tc.asked) {
				t.Errorf("checks\n  %s\nwant\n  %s", strings.Join(tc.d.asked, "\n  "), strings.Join(tc.asked, "\n  "))
			}
			if !tc.allowed && (out.Check != "impersonation" || !strings.Contains(out.Reason, "legacy: ")) {
				t.Errorf("denial names %q: %s", out.Check, out.Reason)
			}
		})
	}
}

// fakeAuthorizer answers by verb: allow, deny, or no opinion; it counts calls.
type fakeAuthorizer struct {
	allow, deny []string
	calls       int
	mu          sync.Mutex
}

func (f *fakeAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	switch {
	case slices.Contains(f.allow, a.GetVerb()):
		return authorizer.DecisionAllow, "fake allows " + a.GetVerb(), nil
	case slices.Contains(f.deny, a.GetVerb()):
		return authorizer.DecisionDeny, "fake denies " + a.GetVerb(), nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// TestChainOfTheGeneratedConfiguration runs the AuthorizationConfiguration
// deputy config apiserver writes.
func TestChainOfTheGeneratedConfiguration(t *testing.T) {
	data, err := manifests.DefaultAuthorizationConfig("/etc/kubernetes/deputy")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := load.LoadFromData(data)
	if err != nil {
		t.Fatal(err)
	}
	deputy := &fakeAuthorizer{allow: []string{"get", "impersonate"}, deny: []string{"delete"}}
	rbac := &fakeAuthorizer{allow: []string{"list", "delete", "get"}}
	c, err := NewChain(ChainOptions{Config: cfg, Deputy: authorizer.AuthorizerFunc(deputy.Authorize), RBAC: authorizer.AuthorizerFunc(rbac.Authorize)})
	if err != nil {
		t.Fatal(err)
	}
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	res := func(u user.Info, verb string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, Resource: "pods", Namespace: "a", APIVersion: "v1", ResourceRequest: true}
	}
	for _, tc := range []struct {
		name                   string
		a                      authorizer.AttributesRecord
		allowed, deputy, outer bool
		by                     string
	}{
		{"deputy allows", res(alice, "get"), true, true, false, "deputy"},
		{"deputy's deny is final, RBAC is not asked", res(alice, "delete"), false, true, false, "deputy"},
		{"deputy's no opinion goes on to RBAC", res(alice, "list"), true, true, false, "rbac"},
		{"nothing allows", res(alice, "watch"), false, true, false, ""},
		{"system:masters is allowed before any webhook", res(&user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}, "delete"), true, false, true, "system:masters"},
		{"nodes are the Node authorizer's", res(&user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes"}}, "get"), true, false, true, "node"},
		{"kube-system ServiceAccounts skip deputy (matchConditions)", res(&user.DefaultInfo{Name: "system:serviceaccount:kube-system:x",
			Groups: []string{"system:serviceaccounts:kube-system"}}, "delete"), true, false, false, "rbac"},
		{"health paths skip deputy (matchConditions)", authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/healthz"}, true, false, false, "rbac"},
		{"impersonation goes to the gate's webhook", authorizer.AttributesRecord{User: alice, Verb: "impersonate", Resource: "users", Name: "x", ResourceRequest: true},
			true, true, false, "deputy-impersonation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := rbac.calls
			d := c.Decide(t.Context(), &tc.a)
			if d.Allowed != tc.allowed || d.Deputy != tc.deputy || d.Outside != tc.outer || d.By != tc.by {
				t.Errorf("got %+v, want allowed %t deputy %t outside %t by %q", d, tc.allowed, tc.deputy, tc.outer, tc.by)
			}
			if tc.a.Verb == "delete" && tc.deputy && rbac.calls != before {
				t.Errorf("RBAC was asked after deputy's deny")
			}
		})
	}
	if _, err := NewChain(ChainOptions{Config: cfg, Deputy: authorizer.AuthorizerFunc(deputy.Authorize)}); err == nil {
		t.Error("an RBAC step without RBAC is accepted")
	}
}

func TestFieldsNamed(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"request.user != 'system:serviceaccount:a:b'", []string{"user"}},
		{"request.resourceAttributes.verb == 'impersonate:user-info' && request.resourceAttributes.resource in ['users', 'groups']", []string{"resource", "verb"}},
		{"!request.groups.exists(g, g in ['system:nodes'])", []string{"groups"}},
		{"request.resourceAttributes['name'] == 'x'", []string{"name"}},
		{`has(request.nonResourceAttributes) && request.nonResourceAttributes.path.startsWith("/healthz")`, []string{"path"}},
		{"request.resourceAttributes . namespace == 'kube-system'", []string{"namespace"}},
	} {
		var got []string
		for f, ok := range fieldsNamed(tc.expr) {
			if ok {
				got = append(got, f)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.expr, got, tc.want)
		}
	}
}

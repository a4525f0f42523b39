package authorizer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"

	deputyauthz "deputy.dev/deputy/authorizer"
)

// fixed answers one decision, and records that it was asked.
func fixed(d authorizer.Decision, reason string, err error, asked *bool) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		if asked != nil {
			*asked = true
		}
		return d, reason, err
	})
}

func TestDecideReportsWhoDecided(t *testing.T) {
	var (
		allow     = authorizer.DecisionAllow
		deny      = authorizer.DecisionDeny
		noOpinion = authorizer.DecisionNoOpinion
		boom      = errors.New("informer not synced")
	)
	tests := []struct {
		name           string
		dflt           deputyauthz.DefaultDecision
		gate, rbac     authorizer.Decision
		rbacErr        error
		want           authorizer.Decision
		wantBy         string
		wantRBACAsked  bool
		wantReasonPart string
	}{
		{"the gate's denial is final and reported as gate", deputyauthz.DefaultDeny, deny, allow, nil, deny, "gate", false, "gate says no"},
		{"the gate's allow is reported as gate", deputyauthz.DefaultNoOpinion, allow, noOpinion, nil, allow, "gate", false, "gate says yes"},
		{"RBAC's allow after the gate's no opinion is reported as rbac", deputyauthz.DefaultDeny, noOpinion, allow, nil, allow, "rbac", true, "rbac says yes"},
		{"no opinion turned into a denial by DefaultDeny is reported as default", deputyauthz.DefaultDeny, noOpinion, noOpinion, nil, deny, "default", true, "no policy rule allows"},
		{"an evaluation error under DefaultDeny is a denial by default", deputyauthz.DefaultDeny, noOpinion, noOpinion, boom, deny, "default", true, "no policy rule allows"},
		{"no opinion kept as such is reported as none", deputyauthz.DefaultNoOpinion, noOpinion, noOpinion, nil, noOpinion, "none", true, ""},
	}
	reasons := map[authorizer.Decision]string{allow: "says yes", deny: "says no"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rbacAsked bool
			z, err := deputyauthz.New(deputyauthz.Options{Default: tt.dflt},
				union.NamedAuthorizer{AuthorizerName: deputyauthz.GateName, Authorizer: fixed(tt.gate, "gate "+reasons[tt.gate], nil, nil)},
				union.NamedAuthorizer{AuthorizerName: deputyauthz.RBACName, Authorizer: fixed(tt.rbac, "rbac "+reasons[tt.rbac], tt.rbacErr, &rbacAsked)})
			if err != nil {
				t.Fatal(err)
			}
			a := &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "get", Resource: "pods", ResourceRequest: true}
			got := z.Decide(t.Context(), a)
			if got.Decision != tt.want || got.Authorizer != tt.wantBy {
				t.Errorf("Decide = (%s, by %q), want (%s, by %q)", decisionName(got.Decision), got.Authorizer, decisionName(tt.want), tt.wantBy)
			}
			if rbacAsked != tt.wantRBACAsked {
				t.Errorf("RBAC asked = %v, want %v", rbacAsked, tt.wantRBACAsked)
			}
			if !strings.Contains(got.Reason, tt.wantReasonPart) {
				t.Errorf("reason %q lacks %q", got.Reason, tt.wantReasonPart)
			}
			if tt.rbacErr != nil && !errors.Is(got.Err, tt.rbacErr) {
				t.Errorf("error %v, want %v", got.Err, tt.rbacErr)
			}
			// Authorize answers the same, without the label.
			d, reason, aerr := z.Authorize(t.Context(), a)
			if d != got.Decision || reason != got.Reason || errString(aerr) != errString(got.Err) {
				t.Errorf("Authorize = (%s, %q, %v), Decide = (%s, %q, %v)", decisionName(d), reason, aerr, decisionName(got.Decision), got.Reason, got.Err)
			}
		})
	}
}

func TestImpersonationShape(t *testing.T) {
	res := func(verb, group, resource, sub string) *authorizer.AttributesRecord {
		return &authorizer.AttributesRecord{Verb: verb, APIGroup: group, Resource: resource, Subresource: sub, ResourceRequest: true}
	}
	tests := []struct {
		name string
		a    *authorizer.AttributesRecord
		want string
	}{
		{"an ordinary request is none", res("get", "", "pods", ""), "none"},
		{"legacy impersonation of a ServiceAccount", res("impersonate", "", "serviceaccounts", ""), "legacy:serviceaccounts"},
		{"legacy impersonation of a user", res("impersonate", "", "users", ""), "legacy:users"},
		{"legacy impersonation of an extra names the resource only", res("impersonate", "authentication.k8s.io", "userextras", "scopes"), "legacy:userextras"},
		{"legacy impersonate on another resource is other", res("impersonate", "batch", "jobs", ""), "legacy:other"},
		{"legacy uids in the core group is other", res("impersonate", "", "uids", ""), "legacy:other"},
		{"legacy impersonate of a path is other", &authorizer.AttributesRecord{Verb: "impersonate", Path: "/api"}, "legacy:other"},
		{"constrained ServiceAccount impersonation", res("impersonate:serviceaccount", "authentication.k8s.io", "serviceaccounts", ""), "constrained:serviceaccount"},
		{"constrained user-info impersonation", res("impersonate:user-info", "authentication.k8s.io", "users", ""), "constrained:user-info"},
		{"an unknown mode is other", res("impersonate:made-up", "authentication.k8s.io", "users", ""), "constrained:other"},
		{"impersonate-on names the mode, not the verb", res("impersonate-on:serviceaccount:patch", "apps", "deployments", ""), "on:serviceaccount"},
		{"impersonate-on of a path", &authorizer.AttributesRecord{Verb: "impersonate-on:arbitrary-node:get", Path: "/api"}, "on:arbitrary-node"},
		{"impersonate-on of an unknown mode is other", res("impersonate-on:x:get", "", "pods", ""), "on:other"},
	}
	all := deputyauthz.ImpersonationShapes()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := deputyauthz.ImpersonationShape(tt.a)
			if got != tt.want {
				t.Errorf("ImpersonationShape = %q, want %q", got, tt.want)
			}
			if !slices.Contains(all, got) {
				t.Errorf("ImpersonationShapes() %v lacks %q", all, got)
			}
		})
	}
	if len(all) != 17 {
		t.Errorf("ImpersonationShapes() has %d values, want 17 (none, 5 legacy targets, 4 modes twice, 3 other): %v", len(all), all)
	}
	legacy := res("impersonate", "", "users", "")
	if n := testing.AllocsPerRun(100, func() { deputyauthz.ImpersonationShape(legacy) }); n > 0 {
		t.Errorf("ImpersonationShape allocates %v times", n)
	}
}

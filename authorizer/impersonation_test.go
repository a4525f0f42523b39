package authorizer_test

import (
	"slices"
	"testing"

	deputyauthz "deputy.dev/deputy/authorizer"
)

func TestParseImpersonationVerb(t *testing.T) {
	tests := []struct {
		verb         string
		kind         deputyauthz.ImpersonationKind
		mode, onVerb string
	}{
		{"impersonate", deputyauthz.LegacyImpersonate, "", ""},
		{"impersonate:serviceaccount", deputyauthz.ConstrainedImpersonate, "serviceaccount", ""},
		{"impersonate:made-up", deputyauthz.ConstrainedImpersonate, "made-up", ""},
		{"impersonate-on:user-info:list", deputyauthz.ImpersonateOn, "user-info", "list"},
		{"impersonate-on:serviceaccount", deputyauthz.ImpersonateOn, "serviceaccount", ""},
		{"impersonated", deputyauthz.NotImpersonation, "", ""},
		{"*", deputyauthz.NotImpersonation, "", ""},
		{"get", deputyauthz.NotImpersonation, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.verb, func(t *testing.T) {
			kind, mode, onVerb := deputyauthz.ParseImpersonationVerb(tt.verb)
			if kind != tt.kind || mode != tt.mode || onVerb != tt.onVerb {
				t.Errorf("ParseImpersonationVerb(%q) = %v, %q, %q; want %v, %q, %q", tt.verb, kind, mode, onVerb, tt.kind, tt.mode, tt.onVerb)
			}
		})
	}
}

func TestImpersonationTargets(t *testing.T) {
	tests := []struct {
		name, group string
		want        []string
	}{
		{"the core group has the legacy targets", "", []string{"groups", "serviceaccounts", "users"}},
		{"authentication.k8s.io has every constrained mode's targets and the legacy uids and extras", "authentication.k8s.io",
			[]string{"groups", "nodes", "serviceaccounts", "uids", "userextras", "users"}},
		{"other groups have none", "apps", nil},
		{"RBAC's * is not a group here", "*", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := deputyauthz.ImpersonationTargets(tt.group)
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("ImpersonationTargets(%q) = %v, want %v", tt.group, got, tt.want)
			}
		})
	}
}

package examples_test

import (
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/examples"
	"deputy.dev/deputy/policy"
)

// TestAliceMaySyncAndDiffTheGuestbook: the README's demo (DEPUTY_TOKEN=
// deputy-demo-alice deputy sync|diff [--local DIR] deputy-system/guestbook against make
// run) needs these grants in the embedded policy; bob has none of them.
func TestAliceMaySyncAndDiffTheGuestbook(t *testing.T) {
	src := policy.NewFileSource([]string{"."}, policy.FileSourceOptions{FS: examples.FS})
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	rbac := deputyauthz.NewRBAC(src.Current)
	for _, tc := range []struct{ verb, subresource string }{{"create", "sync"}, {"get", ""}, {"get", "diff"}, {"create", "diff"}} {
		for _, u := range []struct {
			name  string
			allow bool
		}{{"alice", true}, {"bob", false}} {
			attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: u.name, Groups: []string{user.AllAuthenticated}}, Verb: tc.verb,
				Namespace: "deputy-system", APIGroup: "deputy.dev", Resource: "applications", Subresource: tc.subresource, Name: "guestbook", ResourceRequest: true}
			d, reason, err := rbac.Authorize(t.Context(), attrs)
			if err != nil || (d == authorizer.DecisionAllow) != u.allow {
				t.Errorf("%s %s applications/%s: decision %v (%s), %v; want allowed=%v", u.name, tc.verb, tc.subresource, d, reason, err, u.allow)
			}
		}
	}
}

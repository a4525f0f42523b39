package conformance

import (
	"math/rand/v2"
	"testing"
)

// TestInProcessConformance is the fuzz target's comparison over seeded
// random policies (math/rand, not fuzz input, so the distribution is the
// generator's own): a quick, broad check in every `go test`, and the
// statistics that show the generator asks what matters (allows, near
// misses, several allowing bindings, missing roles).
func TestInProcessConformance(t *testing.T) {
	const policies, perPolicy = 1000, 50
	var stats struct{ requests, allowed, multi, errs, invalid int }
	for seed := range uint64(policies) {
		r := rand.New(rand.NewPCG(seed, 7))
		o := Options{Valid: seed%2 == 0, Namespaces: 3, ClusterRoles: 8, Roles: 8, ClusterRoleBindings: 12, RoleBindings: 12}
		if seed%5 == 0 {
			o.KnownClusterRoles = bootstrapClusterRoleNames()
		}
		p := GeneratePolicy(r, o)
		if seed%5 == 0 {
			p.merge(bootstrapPolicy())
		}
		ip, err := newInProcess(p, r)
		if err != nil {
			t.Fatal(err)
		}
		for _, req := range GenerateRequests(r, p, perPolicy) {
			e, errs := ip.check(req)
			for _, err := range errs {
				t.Error(err)
			}
			if len(errs) > 0 {
				t.Fatalf("seed %d policy:\n%s", seed, dumpPolicy(p))
			}
			stats.requests++
			if e.Allowed {
				stats.allowed++
			}
			if len(e.Reasons) > 1 {
				stats.multi++
			}
			if len(e.Errors) > 0 {
				stats.errs++
			}
			if !o.Valid {
				stats.invalid++
			}
		}
	}
	t.Logf("%d requests over %d policies: %d allowed (%d by several bindings), %d no opinion with missing-role errors, %d against policies kube-apiserver would reject",
		stats.requests, policies, stats.allowed, stats.multi, stats.errs, stats.invalid)
}

package conformance

import (
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"

	"deputy.dev/deputy/policy"
)

// fuzzRequests is how many SubjectAccessReviews each fuzz input asks.
const fuzzRequests = 12

// FuzzRBACConformance is differential fuzzing of deputy's evaluator against
// upstream's RBACAuthorizer (k8s.io/kubernetes
// plugin/pkg/auth/authorizer/rbac): the input drives the policy and request
// generator (ByteRand), including objects kube-apiserver would reject, and
// one input in eight adds the bootstrap policy. Every input found to
// disagree is kept by `go test -fuzz` under
// testdata/fuzz/FuzzRBACConformance and then runs as a regression test in
// every `go test`. The files there now are seeds chosen for what they make
// the generator produce (their names say what); an input means what the
// current generator makes of it, so changing the generator changes them.
//
// The comparison is inProcess.check: deputy and upstream over the same
// binding order give the same decision and reason byte for byte, deputy's
// error is upstream's reason's errors, deputy composed as served reports them
// as the evaluation error, and every answer — upstream over shuffled bindings
// too — is one the per-binding Reference allows.
func FuzzRBACConformance(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 3))
	for range 16 {
		seed := make([]byte, 64+r.IntN(960))
		for i := range seed {
			seed[i] = byte(r.IntN(256))
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFuzzInput(t, data)
	})
}

func checkFuzzInput(t *testing.T, data []byte) {
	t.Helper()
	r := NewByteRand(data)
	o := Options{
		Valid:               r.IntN(4) == 0,
		Namespaces:          1 + r.IntN(3),
		ClusterRoles:        r.IntN(6),
		Roles:               r.IntN(6),
		ClusterRoleBindings: r.IntN(7),
		RoleBindings:        r.IntN(7),
	}
	withBootstrap := r.IntN(8) == 0
	if withBootstrap {
		o.KnownClusterRoles = bootstrapClusterRoleNames()
	}
	p := GeneratePolicy(r, o)
	if withBootstrap {
		p.merge(bootstrapPolicy())
	}
	reqs := GenerateRequests(r, p, fuzzRequests)
	ip, err := newInProcess(p, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range reqs {
		if _, errs := ip.check(req); len(errs) > 0 {
			for _, err := range errs {
				t.Error(err)
			}
			t.Fatalf("policy:\n%s", dumpPolicy(p))
		}
	}
}

// bootstrapPolicy is kube-apiserver's bootstrap RBAC policy, with the
// aggregated ClusterRoles' rules computed (by deputy's aggregation, which the
// real-apiserver run checks against kube-controller-manager's controller).
var bootstrapPolicy = sync.OnceValue(func() *Policy {
	p := &Policy{Namespaces: []string{"kube-system", "kube-public"}}
	var crs []*rbacv1.ClusterRole
	for _, list := range [][]rbacv1.ClusterRole{bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()} {
		for i := range list {
			crs = append(crs, &list[i])
		}
	}
	aggregated, err := policy.AggregateClusterRoles(crs)
	if err != nil {
		panic(err)
	}
	p.ClusterRoles = aggregated
	for _, list := range [][]rbacv1.ClusterRoleBinding{bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()} {
		for i := range list {
			p.ClusterRoleBindings = append(p.ClusterRoleBindings, &list[i])
		}
	}
	roles, bindings := bootstrappolicy.NamespaceRoles(), bootstrappolicy.NamespaceRoleBindings()
	for _, ns := range slices.Sorted(maps.Keys(roles)) {
		for i := range roles[ns] {
			roles[ns][i].Namespace = ns
			p.Roles = append(p.Roles, &roles[ns][i])
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(bindings)) {
		for i := range bindings[ns] {
			bindings[ns][i].Namespace = ns
			p.RoleBindings = append(p.RoleBindings, &bindings[ns][i])
		}
	}
	return p
})

var bootstrapClusterRoleNames = sync.OnceValue(func() []string {
	var names []string
	for _, cr := range bootstrappolicy.ClusterRoles() {
		names = append(names, cr.Name)
	}
	return names
})

// Package conformance proves that deputy's RBAC evaluator decides exactly as
// kube-apiserver's RBAC authorizer (k8s.io/kubernetes
// plugin/pkg/auth/authorizer/rbac), three ways:
//
//   - against a real kube-apiserver v1.37.2 with RBAC authorization only
//     (TestAPIServerConformance): random, realistic policies and the
//     apiserver's own bootstrap policy are loaded into the apiserver and into a
//     deputy process, and the same SubjectAccessReviews are asked of both;
//   - in process, with go test -fuzz (FuzzRBACConformance): fuzz input drives
//     the same generator, also through inputs the apiserver would reject, and
//     upstream's RBACAuthorizer is the reference;
//   - side by side for speed (BenchmarkSideBySide);
//   - the reverse queries `deputy who-can` and `deputy can-i --list` make
//     (authorizer.WhoCan, authorizer.RulesFor), cross-checked for every
//     subject of the policy against kube-apiserver's SubjectAccessReviews
//     (TestWhoCanAndRulesAgainstAPIServer, same setup as the conformance
//     run) and in process against upstream's authorizer
//     (TestWhoCanAndRulesInProcess).
//
// The generator (GeneratePolicy, GenerateRequests) and the reference
// (Reference, Expectation) live in non-test files so that all three share
// them. This package belongs to the test module and must never be imported by
// the product.
//
// Comparing reasons: kube-apiserver visits bindings in its informer cache's
// order, which is a Go map's order and so unspecified (it changes from one
// request to the next). When several bindings allow a request, each of their
// reasons is a correct answer. The comparison therefore computes, with
// upstream's authorizer evaluated on one binding at a time, the set of every
// reason any visiting order could give, and requires both the apiserver's and
// deputy's reason to be in it (Expectation.Reasons). Where the order is fixed
// (in-process, upstream over ordered listers), deputy's reason must also equal
// upstream's exactly, since deputy visits bindings in the order it is given.
package conformance

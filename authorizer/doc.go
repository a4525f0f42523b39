// Package authorizer makes deputy's SubjectAccessReview decisions. It takes
// k8s.io/apiserver authorizer.Attributes and returns a Decision, a reason and
// an evaluation error, exactly as kube-apiserver's authorizers do:
//
//   - RBAC evaluates Role/ClusterRole bindings from the current policy snapshot
//     with the semantics of kube-apiserver's RBAC authorizer
//     (plugin/pkg/auth/authorizer/rbac), reason strings included, but with
//     bindings indexed by subject so the cost does not grow with the number of
//     bindings;
//   - the impersonation grammar (impersonation.go: the verbs impersonate,
//     impersonate:<mode> and impersonate-on:<mode>:<verb>, the modes deputy
//     knows and the targets each check names), used by the gate and by the
//     RBAC admission lint of package webhook;
//   - the impersonation Gate answers only the impersonation checks
//     kube-apiserver sends: a configured sync identity may impersonate exactly
//     the ServiceAccounts its AppProjects derive and act as them only inside
//     those projects (destinations, kinds by their real scope, names in
//     white- and blacklists, an allow-list of subresources); everyone else only
//     through RBAC rules naming the target; protected targets never;
//   - New composes deputy's authorizers with k8s.io/apiserver's union and
//     applies the configured default decision; a default denial names the
//     closest binding (ExplainDenial), computed on the deny path only;
//     Decide also says which authorizer decided (gate, rbac, default, none),
//     and ImpersonationShape labels a request's impersonation check from a
//     fixed list, for metrics and decision logs;
//   - BootstrapGrants are kube-apiserver's bootstrap grants every client
//     needs, which a policy with default decision Deny must keep.
//   - reverse queries over the same evaluation (whocan.go, rules.go): WhoCan
//     (every subject allowed a request, with binding and rule or the
//     AppProject entry, checked through the gate, RBAC and the default
//     decision; groups expanded where names tell membership), RulesFor (the
//     rules applying to a user, as SelfSubjectRulesReview) and Gate.RightsOf
//     (what the gate lets an identity impersonate), for `deputy who-can`
//     and `deputy can-i --list`.
//
// Every component takes plain options (GateOptions, Options); the mapping
// from deputy's configuration file is the composition root's. It must not do
// HTTP or import config. An error here is never an Allow.
package authorizer

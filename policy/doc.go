// Package policy owns deputy's object model and where it comes from: RBAC
// objects (Role, ClusterRole, RoleBinding, ClusterRoleBinding), AppProjects of
// argoproj.io and deputy.dev (decoded strictly, Argo CD's against Argo CD's
// own schema), deputy.dev Applications, static token files, the resource
// catalog (the kind and scope of every API resource: built in, from policy
// CustomResourceDefinitions, or from the cluster's discovery), and the
// immutable, indexed Snapshot that the authorizer and the token reviewer read
// on every request. It also holds every AppProject rule: validation,
// ServiceAccount derivation, destination and kind permission (names
// included), and which project an Application may use (project namespaces
// and sourceNamespaces).
//
// Sources build a new Snapshot and swap it in atomically; a source that fails to
// load keeps serving the last good Snapshot and reports the error (file and
// document index) through its Status, which drives readiness.
//
// The package must not know about HTTP and must not evaluate requests: matching
// a request against rules is the authorizer's job.
package policy

// Package policy owns deputy's object model and where it comes from: RBAC
// objects (Role, ClusterRole, RoleBinding, ClusterRoleBinding), AppProjects of
// argoproj.io and deputy.dev, deputy.dev Applications, static token files, and the immutable, indexed
// Snapshot that the authorizer and the token reviewer read on every request.
//
// Sources build a new Snapshot and swap it in atomically; a source that fails to
// load keeps serving the last good Snapshot and reports the error (file and
// document index) through its Status, which drives readiness.
//
// The package must not know about HTTP and must not evaluate requests: matching
// a request against rules is the authorizer's job.
package policy

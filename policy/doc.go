// Package policy owns deputy's object model and where it comes from: RBAC
// objects (Role, ClusterRole, RoleBinding, ClusterRoleBinding), AppProjects of
// argoproj.io and deputy.dev (decoded strictly, Argo CD's against Argo CD's
// own schema), deputy.dev Applications, static token files, the resource
// catalog (the kind and scope of every API resource: built in, from policy
// CustomResourceDefinitions, or from the cluster's discovery), the file source
// (FileSource), and the immutable, indexed Snapshot and ClusterState that the
// authorizer and the token reviewer read on every request. The cluster's
// informers that build a ClusterState live in the subpackage clustersource.
//
// It also holds every AppProject rule, once: validation, ServiceAccount
// derivation, source repository permission (with Argo CD's Git URL
// normalisation), destination and kind permission (names included), and
// which project an Application may use (project namespaces and
// sourceNamespaces). Every glob of a project is compiled once, by one guarded
// compiler (CompiledProject).
//
// Sources build a new Snapshot or ClusterState and swap it in atomically; a
// source that fails to load keeps serving the last good one and reports the
// error (file and document index) through its Status, which drives readiness.
//
// The package must not know about HTTP, the Kubernetes client, or deputy's
// configuration, and must not evaluate requests: matching a request against
// rules is the authorizer's job, fetching and applying manifests the sync
// engine's.
package policy

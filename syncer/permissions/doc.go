// Package permissions is a sync's preflight apart from deciding what to ask:
// the permissions a sync needs (Check, collected in a Set, and Permission,
// collected by Grants), the questions asked of kube-apiserver about them
// (Review: SelfSubjectAccessReviews as the sync identity, through an Asker,
// one per (verb, resource, namespace) and, behind a denied one, one per
// name), their order in reports, and the report of a failed preflight with
// RBAC objects (Roles per namespace, a ClusterRole, their bindings to the
// ServiceAccount) that grant everything the operation needs at once.
//
// Package syncer decides what to ask (which objects, which verbs) and
// supplies the Asker (its clients, impersonating the sync identity); this
// package imports nothing of the module.
package permissions

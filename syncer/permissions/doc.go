// Package permissions is the vocabulary of a sync's preflight: the
// permissions a sync needs (Permission, collected by Grants), their order
// in reports, and the report of a failed preflight with RBAC objects (Roles
// per namespace, a ClusterRole, their bindings to the ServiceAccount) that
// grant everything the operation needs at once.
//
// It asks nothing of a cluster: package syncer decides what to ask and
// asks it (SelfSubjectAccessReviews as the sync identity).
package permissions

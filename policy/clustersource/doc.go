// Package clustersource reads deputy's policy from the cluster (cluster
// mode): the cluster's Roles, ClusterRoles, RoleBindings and
// ClusterRoleBindings and the AppProjects of argoproj.io and deputy.dev,
// through informers, into the immutable policy.ClusterState that the
// impersonation gate and the token reviewer read. It also tracks which
// custom resources the cluster serves (the AppProject CRDs, and those its
// user names, such as deputy.dev Applications) and the cluster's resource
// catalog.
//
// It owns the informers, the CRD discovery and the debounced rebuild; the
// object model, decoding, validation and indexing it uses are package
// policy's. It must not evaluate requests, write to the cluster, or know
// about HTTP or deputy's configuration (it takes a *rest.Config or clients).
package clustersource

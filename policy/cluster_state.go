package policy

// ClusterState is the policy deputy reads from the cluster in cluster mode:
// the cluster's RBAC objects (already aggregated by kube-controller-manager)
// and its AppProjects of both groups. Like Snapshot it is immutable; the
// cluster source (package policy/clustersource) swaps in a new one after
// informer events.
type ClusterState struct {
	// RBAC indexes the cluster's Roles, ClusterRoles and bindings.
	RBAC *RBAC
	// Projects are the cluster's AppProjects of argoproj.io and deputy.dev.
	Projects []Project
	// Synced is false until every informer has listed once; until then the
	// impersonation gate denies impersonation (fail closed).
	Synced bool
	// Resources is the built-in resources plus what the cluster's discovery
	// serves (custom resources, aggregated APIs): the scope and kind of every
	// resource, for the impersonation gate.
	Resources *ResourceCatalog
}

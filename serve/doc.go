// Package serve is deputy's composition root, `deputy serve`: Run turns the
// configuration file (package config, defaulted and validated) into the
// plain options of every component and starts them.
//
// It owns:
//   - the run mode, decided once (startRunMode): file mode reads the policy
//     (RBAC objects, AppProjects, Applications, tokens) from files; cluster
//     mode (cluster.kubeconfig or cluster.inCluster) reads RBAC objects,
//     AppProjects and Applications from the cluster too. Every component
//     takes what depends on the mode from there: the impersonation gate's
//     cluster state, the token chains' delegated TokenReview and project
//     roles, deputy's Applications (apps.File or apps.Controller), the
//     delegated authorization of deputy's API, the readiness checks;
//   - the mapping from the configuration onto the options of authorizer
//     (GateOptions), tokenreview, apps, syncer and its sources
//     (sync.repositories, sync.limits, the cluster registry sync.clusters,
//     whose kubeconfigs it loads), and webhook (server, API, Git push);
//   - certificates at start (development certificates generated in
//     tls.certDir when none exist) and readiness (/readyz: the policy, and
//     in cluster mode the cluster's state);
//   - the order of shutdown: syncs drain and the sync Lease is released
//     while the server still answers kube-apiserver.
//
// It must not be imported by anything but cmd/deputy (`deputy serve`, and
// `deputy can-i`, which composes the same gate with GateOptions), serve
// HTTP itself (package webhook does), or hold a rule of a component: it
// only wires them.
package serve

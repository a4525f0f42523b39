package config

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig builds the client configuration of cluster mode from
// cluster.kubeconfig (+ cluster.context) or, with cluster.inCluster, the
// Pod's ServiceAccount. `deputy serve` and `deputy can-i` both read the
// cluster with it.
//
// Errors: the kubeconfig or in-cluster configuration cannot be loaded,
// naming the setting and flag to fix.
func (c Cluster) RESTConfig() (*rest.Config, error) {
	if c.InCluster {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("failed to load the in-cluster client configuration (cluster.inCluster / --in-cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: c.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load kubeconfig %s (cluster.kubeconfig / --kubeconfig, cluster.context / --context): %w", c.Kubeconfig, err)
	}
	return cfg, nil
}

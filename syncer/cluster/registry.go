package cluster

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/client-go/rest"
)

// Entry is one cluster of a Registry: the name and server URL
// Applications' destinations use, and deputy's own client configuration for
// it, or why that could not be loaded.
type Entry struct {
	// Name is the cluster's name (spec.destination.name).
	Name string
	// Server is the cluster's server URL (spec.destination.server); a
	// trailing slash is ignored.
	Server string
	// Config is the controller identity's client configuration for the
	// cluster (a kubeconfig context, or rest.InClusterConfig).
	Config *rest.Config
	// Err, when set, is why Config could not be loaded: syncs to the cluster
	// fail with it, and the others go on.
	Err error
}

// InClusterServer and InClusterName are how Argo CD (and deputy) name the
// cluster deputy runs in.
const (
	InClusterServer = "https://kubernetes.default.svc"
	InClusterName   = "in-cluster"
)

// InCluster is the entry of the cluster deputy runs in (or the one a
// kubeconfig names), registered as Argo CD names it: InClusterName at
// InClusterServer. config is deputy's own identity there.
func InCluster(config *rest.Config) Entry {
	return Entry{Name: InClusterName, Server: InClusterServer, Config: config}
}

// Registry is the syncer.Clusters of a fixed list of clusters (deputy's
// sync.clusters, loaded by the composition root): destination names resolve
// to server URLs, server URLs to deputy's own client configuration for that
// cluster. It is safe for concurrent use.
type Registry struct {
	names   map[string]string // name -> server
	entries map[string]Entry
	known   string // for messages
}

// NewRegistry returns the registry of entries; a later entry of the
// same name or server replaces an earlier one. An empty registry resolves
// no destination, and says how to add one.
func NewRegistry(entries ...Entry) *Registry {
	r := &Registry{names: map[string]string{}, entries: map[string]Entry{}}
	known := make([]string, 0, len(entries))
	for _, e := range entries {
		server := normalizeServer(e.Server)
		r.names[e.Name] = server
		r.entries[server] = e
		known = append(known, e.Name+" ("+server+")")
	}
	r.known = strings.Join(known, ", ")
	if r.known == "" {
		r.known = "none: add the cluster to sync.clusters in deputy's configuration"
	}
	return r
}

func normalizeServer(s string) string { return strings.TrimRight(s, "/") }

// ServerForName returns the server URL of the cluster registered as name
// (spec.destination.name); it implements syncer.Clusters.
//
// Errors: no cluster of that name is registered (the message lists the
// registered ones).
func (r *Registry) ServerForName(_ context.Context, name string) (string, error) {
	server, ok := r.names[name]
	if !ok {
		return "", fmt.Errorf("cluster %q is not registered with deputy (registered: %s)", name, r.known)
	}
	return server, nil
}

// RESTConfig implements syncer.Clusters: a copy of the entry's configuration.
//
// Errors: no cluster at server is registered, or its entry's Err (its
// configuration did not load), or the entry has no configuration.
func (r *Registry) RESTConfig(_ context.Context, server string) (*rest.Config, error) {
	e, ok := r.entries[normalizeServer(server)]
	if !ok {
		return nil, fmt.Errorf("cluster %s is not registered with deputy (registered: %s)", server, r.known)
	}
	if e.Err != nil {
		return nil, e.Err
	}
	if e.Config == nil {
		return nil, fmt.Errorf("cluster %s has no client configuration in deputy's cluster registry", server)
	}
	return rest.CopyConfig(e.Config), nil
}

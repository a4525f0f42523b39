// Package cluster is what deputy's sync engine knows of destination
// clusters: where they are (Registry: the names and server URLs
// Applications' destinations use, and deputy's own client configuration for
// each, loaded by the composition root from sync.clusters) and what they
// serve (Capabilities: the version and API versions a Helm chart renders
// against, read from the discovery an operation makes as its identity).
//
// It must not impersonate or talk to a cluster on its own: the engine
// (package syncer) builds every client, as the derived ServiceAccount, from
// the configuration Registry returns.
package cluster

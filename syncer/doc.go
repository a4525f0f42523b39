// Package syncer is deputy's sync engine: it renders an Application's
// manifests from Git (plain files or kustomize, read lazily from the Git
// objects within the operation's limits), checks them against the
// AppProject (source repositories, destinations, kinds), derives the
// ServiceAccount to impersonate (Argo CD's destinationServiceAccounts), runs a
// preflight of every permission the operation needs as that ServiceAccount,
// applies server-side (field manager "deputy") as that ServiceAccount, prunes
// only objects carrying the Application's tracking annotation, never applies
// or prunes an object another Application's tracking annotation claims, and
// records the operation's state. It also queues operations (one at a time per
// Application).
//
// It must not decide who may impersonate: that is the authorizer's
// impersonation gate, answering kube-apiserver's checks of the requests this
// package makes. It must not read anything an Application's source does not
// name, nor let a tenant steer what it reads: remote repositories fetched
// from exactly the Application's URL into one mirror per URL, with only the
// credentials that cover that URL; local repositories only under the
// configured directories, confined to them; no kustomize remote content
// unless the operator allows it, never exec or KRM function plugins or Helm;
// every fetch, render and operation bounded (Limits). It must not render in
// the process it runs in (deputy's, which answers kube-apiserver's webhooks):
// renders run in render workers, child processes bounded in memory
// (render_worker.go), and a program that runs an Engine calls
// RenderWorkerMain first thing in main when IsRenderWorker.
package syncer

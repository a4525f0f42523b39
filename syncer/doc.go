// Package syncer is deputy's sync engine: it renders an Application's
// manifests from Git (plain files or kustomize), checks them against the
// AppProject (source repositories, destinations, kinds), derives the
// ServiceAccount to impersonate (Argo CD's destinationServiceAccounts), runs a
// preflight of every permission the operation needs as that ServiceAccount,
// applies server-side (field manager "deputy") as that ServiceAccount, prunes
// only objects carrying the Application's tracking annotation, and records the
// operation's state. It also queues operations (one at a time per
// Application).
//
// It must not decide who may impersonate: that is the authorizer's
// impersonation gate, answering kube-apiserver's checks of the requests this
// package makes.
package syncer

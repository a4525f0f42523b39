// Package syncer is deputy's sync engine: it checks every source of an
// Application (spec.source, or each of spec.sources, ref sources included)
// against the AppProject before anything is fetched, gets the manifests of
// each source at its revision from its sub-package source (Git fetched,
// rendered and concatenated in source order there, within the operation's
// limits: source.RenderApplication, which `deputy render` shares), checks
// the objects against the AppProject (destinations, kinds), derives the
// ServiceAccount to impersonate (Argo CD's destinationServiceAccounts), runs a
// preflight of every permission the operation needs as that ServiceAccount,
// applies server-side (field manager "deputy") as that ServiceAccount in Argo
// CD's order of phases, waves and hooks (placed by sub-package waves), waits
// after each wave until its objects are healthy (judged and watched through
// sub-package health), runs hooks and their delete policies, prunes only
// objects carrying the Application's tracking annotation (last, in reverse
// wave order), never applies, deletes or prunes an object another
// Application's tracking annotation claims, and reports the operation's state
// as it goes: one operation (Runner, Engine). The same steps before any
// write serve two readers: Diff (a server-side dry-run apply of every
// object as the ServiceAccount, compared with the live object by
// sub-package diff) and Compare (drift detection: the live state's metadata
// from the shared informers of sub-package livestate, read as the
// ServiceAccount, checked against what deputy applied). The preflight's
// permissions, the questions asked of kube-apiserver about them and its
// report live in sub-package permissions; what to ask is decided here. It
// holds the cluster registry destinations resolve in (Clusters; sub-package
// cluster: Registry, names to server URLs, server URLs to deputy's own
// client configuration, loaded by the composition root from its
// configuration; and a destination's Capabilities). Queueing
// operations, the Application controller and their status belong to package
// apps, which calls it (never the other way).
//
// It must not read deputy's configuration or call back into the server
// (webhook, serve), nor decide who may impersonate: that is the authorizer's
// impersonation gate, answering kube-apiserver's checks of the requests this
// package makes. It must not fetch or render anything itself: every read of
// a repository and every render goes through source.Cache (built from
// EngineOptions.Source), which holds what a tenant must not steer (one
// mirror per exact URL, credentials matched to it, local repositories
// confined, render workers bounded in memory, source.Limits); a program
// that runs an Engine calls source.RenderWorkerMain first thing in main
// when source.IsRenderWorker.
package syncer

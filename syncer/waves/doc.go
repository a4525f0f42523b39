// Package waves places the objects of a sync in Argo CD's order: which sync
// phase each runs in (PreSync, Sync, PostSync, SyncFail) and whether it is a
// hook (annotation argocd.argoproj.io/hook, or Helm's helm.sh/hook mapped as
// Argo CD maps it), its wave (deputy.dev/sync-wave,
// argocd.argoproj.io/sync-wave, or a Helm hook's helm.sh/hook-weight), a
// hook's delete policies, and the order of the whole sync: phase, wave,
// Argo CD's kind order, name, with Namespaces and CustomResourceDefinitions
// pulled forward to the first object that needs them (gitops-engine's
// pkg/sync sync_tasks.go and pkg/sync/hook, re-expressed).
//
// It only reads objects: applying, waiting and deleting are the engine's
// (package syncer). It must not import the engine.
package waves

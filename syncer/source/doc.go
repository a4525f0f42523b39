// Package source gives an Application source's manifests at a revision
// (Argo CD's spec.source: repoURL, targetRevision, path): it fetches the
// repository into a bare mirror (one per exact repository URL, with only the
// configured credentials that cover that URL) or opens a local one under
// the configured directories, resolves the revision to a commit, and
// renders the path at that commit (plain YAML/JSON manifests, kustomize, or
// a Helm chart through package helm)
// in a render worker, reading lazily from the Git objects within Limits; a
// Helm source of spec.sources also reads, in the same worker and budget, the
// repositories of the ref sources its $REF/path value files name (Ref,
// sources.go). RenderApplication renders every source of an Application
// (spec.sources in order, each in its own worker, within the limits
// together), as the sync engine and `deputy render` both do. Local repositories are opened by
// its sub-package localrepo.
// Its entry points are New (Options) → Cache, Cache.Render (→ Rendered),
// RenderApplication (→ RenderedApplication), RenderCache (bounded, for drift
// detection's repeated renders),
// Cache.ResolveRevision, CheckSupported, WithProject, and the render worker hook
// (IsRenderWorker, RenderWorkerMain). The name is the Application field's,
// spec.source (policy.FileSource and policy/clustersource are something
// else: where policy objects are read from).
//
// It must not decide what an Application may deploy (the sync engine,
// package syncer, checks the AppProject and talks to clusters), and must not
// let a tenant steer what it reads: charts from Helm repositories and OCI
// registries (spec.source.chart) fetched, verified by digest, cached and
// unpacked by the render worker (package chartrepo) with at most the one
// credential that covers the repository URL, sent to its exact origin
// only, remote chart dependencies only from repositories the project's
// sourceRepos permit and without credentials; remote repositories fetched from
// exactly the Application's URL (http(s) only, one reading: no credentials,
// dot segments or encoded separators in it), credentials never sent
// elsewhere or over plain http except to loopback; local repositories only
// under Options.LocalRepositories, every file access confined to them; no
// kustomize remote content unless the operator allows it, never exec or KRM
// function plugins or kustomize's Helm; no values URL; every fetch and render bounded (Limits, each
// exceeded limit a *LimitError naming its configuration field). It must not
// render in the process it runs in (deputy's, which answers kube-apiserver's
// webhooks): renders run in render workers, child processes bounded in
// memory (render_worker.go), and a program that renders through a Cache
// calls RenderWorkerMain first thing in main when IsRenderWorker.
package source

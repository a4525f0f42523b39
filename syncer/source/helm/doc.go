// Package helm renders a Helm chart as `helm template` does (Helm 3's
// library, as Argo CD renders charts), for the render worker of package
// syncer/source: a chart held in a Git repository, whose files, values
// files and file:// dependencies are read through Files (the worker's view
// of one commit, within its limits), or a chart archive's files
// (Options.Archive, fetched by package chartrepo); remote dependencies come
// through Options.Dependency, $REF/path values files through Options.Refs
// (the views of spec.sources' ref sources); the values are merged as Argo CD
// merges spec.source.helm (Validate, values.go), and the objects come back
// in `helm template`'s order, hooks included as ordinary objects with
// their annotations. Its entry points are Render and Validate.
//
// Why Helm 3 (helm.sh/helm/v3 v3.22.0) and not 4 (v4.3.1), though both
// build with deputy's k8s.io v0.37.2 and controller-runtime v0.25.2: Argo
// CD renders charts with Helm 3, and deputy's promise is that an Argo CD
// Application renders the same; the comparison test holds deputy to the
// helm v3.22.0 binary, built from the test module (make test-binaries).
//
// It must not run in deputy's own process (only in a render worker, whose
// memory is bounded), read anything but Files or the archive it is given
// (no disk, no network of its own: remote dependencies come only through
// Options.Dependency, values URLs and `lookup` are refused or return
// nothing), or
// keep release state anywhere: each render is a dry run of an install
// against an in-memory release store.
package helm

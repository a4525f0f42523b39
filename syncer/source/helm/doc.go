// Package helm renders a Helm chart held in a Git repository as `helm
// template` does (Helm 3's library, as Argo CD renders charts), for the
// render worker of package syncer/source: the chart's files, its values
// files and its file:// dependencies are read through Files (the worker's
// view of one commit, within its limits), the values are merged as Argo CD
// merges spec.source.helm (Validate, values.go), and the objects come back
// in `helm template`'s order, hooks included as ordinary objects with
// their annotations. Its entry points are Render and Validate.
//
// It must not run in deputy's own process (only in a render worker, whose
// memory is bounded), read anything but Files (no disk, no network: remote
// dependencies, values URLs and `lookup` are refused or return nothing), or
// keep release state anywhere: each render is a dry run of an install
// against an in-memory release store.
package helm

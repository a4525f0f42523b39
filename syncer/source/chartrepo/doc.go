// Package chartrepo fetches Helm charts from Helm repositories (an https://
// URL serving index.yaml, as `helm repo add` takes) and OCI registries
// (oci://HOST/PATH, Argo CD's spelling), for deputy's render workers: it
// resolves a chart version or semver constraint as Helm does
// (repo.IndexFile.Get: an exact version first, else the newest version that
// matches; "" is the newest stable one), downloads the archive, checks its
// sha256 against the index's digest or the OCI layer's, caches it by
// repository, credential and digest (never by digest alone: a digest is
// no secret), and unpacks it within the render's limits (a render's chart
// and its dependencies together). It also fetches a
// chart's remote dependencies (Chart.yaml dependencies whose repository is
// https:// or oci://), each only when the project's sourceRepos permit its
// repository (policy.CompiledProject.SourcePermitted, the one
// implementation).
//
// It must not run in deputy's own process: only a render worker calls it
// (an index.yaml or a chart is hostile input, parsed and unpacked in the
// worker's bounded memory). It must not send a credential anywhere but to
// the exact scheme, host and port of the repository it was matched for, at
// or below the repository's path (a chart URL in index.yaml on another
// host or another path of the same host, a redirect elsewhere and every
// dependency get none; Argo CD's passCredentials=false), must not speak
// plain http except to loopback, must not read more than Limits allow
// (each exceeded limit a *limit.Error naming its field), and must not trust
// the cache: a cached archive is used only when its sha256 is the digest the
// repository announces now.
package chartrepo

package source

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/source/gitfetch"
	"deputy.dev/deputy/syncer/source/helm"
	"deputy.dev/deputy/syncer/source/localrepo"
)

// Options configure New.
type Options struct {
	// CacheDir holds the clones of https repositories (bare mirrors, one per
	// exact repository URL, fetched on every render). Required; created when
	// missing.
	CacheDir string
	// LocalRepositories are the absolute directories under which local
	// repositories (file:// URLs and absolute paths) may be opened
	// (config sync.localRepositories); every file access of such a
	// repository stays inside the directory that holds it. Empty: every
	// local repository is refused, naming sync.localRepositories. A
	// directory that is, contains or is inside CacheDir is refused by New.
	LocalRepositories []string
	// RepoCredentials are the HTTPS credentials of Git repositories (see
	// RepoCredential for how one is matched to a repository URL).
	RepoCredentials []RepoCredential
	// Secrets reads the Secrets that RepoCredentials name.
	Secrets SecretGetter
	// Kustomize configures kustomize builds (remote resources are off by
	// default).
	Kustomize KustomizeOptions
	// Limits bound each fetch and render (and, for the sync engine, each
	// operation); zero fields take DefaultLimits.
	Limits Limits
}

// Cache gives an Application source's manifests at a revision: it clones
// remote repositories (bare mirrors under CacheDir/repos, one per exact
// URL, fetched on every use) and opens local ones in place, confined to the
// directories of Options.LocalRepositories, and renders in render workers.
// It is safe for concurrent use: a mirror is locked against a concurrent
// fetch while it is read.
type Cache struct {
	dir     string
	creds   []RepoCredential
	secrets SecretGetter
	// local are the allowed local repository directories
	// (sync.localRepositories), cleaned and absolute; empty refuses every
	// local repository.
	local []string
	// limits bound fetches and renders.
	limits Limits
	// kustomize configures kustomize builds.
	kustomize KustomizeOptions
	// worker starts the render workers renders run in.
	worker workerCommand

	mu    sync.Mutex
	locks map[string]*sync.Mutex
	// refsMu serialises renders that lock several mirrors (lockRefs).
	refsMu sync.Mutex
}

// New checks opts, fills their defaults (DefaultLimits,
// DefaultKustomizeRemoteTimeout) and creates the cache directory.
//
// Errors: CacheDir is empty or cannot be created; a local repository
// directory is relative or overlaps CacheDir (naming
// sync.localRepositories); a credential has no URL, a URL that is not
// https://HOST[:PORT][/PATH], neither files nor a Secret, or a Secret while
// opts.Secrets is nil.
func New(opts Options) (*Cache, error) {
	if opts.CacheDir == "" {
		return nil, errors.New("source: Options.CacheDir is required")
	}
	if err := os.MkdirAll(opts.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("source: failed to create the cache directory: %w", err)
	}
	opts.Limits = opts.Limits.WithDefaults()
	if opts.Kustomize.RemoteTimeout <= 0 {
		opts.Kustomize.RemoteTimeout = DefaultKustomizeRemoteTimeout
	}
	local, err := checkLocalRepositories(opts.LocalRepositories, opts.CacheDir)
	if err != nil {
		return nil, err
	}
	for i, c := range opts.RepoCredentials {
		if c.URL == "" {
			return nil, fmt.Errorf("source: RepoCredentials[%d].URL is empty", i)
		}
		if _, err := parseCredentialScope(c.URL); err != nil {
			return nil, fmt.Errorf("source: RepoCredentials[%d].URL %q: %w (use https://HOST[:PORT][/PATH], or oci://HOST[:PORT][/PATH] for an OCI registry)", i, c.URL, err)
		}
		if c.Secret == nil && (c.UsernameFile == "" || c.PasswordFile == "") {
			return nil, fmt.Errorf("source: RepoCredentials[%d] (%s) needs usernameFile and passwordFile, or a Secret", i, c.URL)
		}
		if c.Secret != nil && opts.Secrets == nil {
			return nil, fmt.Errorf("source: RepoCredentials[%d] (%s) names a Secret but Options.Secrets is nil", i, c.URL)
		}
	}
	gitfetch.Install()
	// kustomize's remote loading is set up by each render worker
	// (configureKustomizeRemote), not here: no render runs in this process.
	return &Cache{dir: opts.CacheDir, creds: opts.RepoCredentials, secrets: opts.Secrets,
		local: local, limits: opts.Limits, kustomize: opts.Kustomize}, nil
}

// Limits returns the limits the cache applies, defaults filled in.
func (c *Cache) Limits() Limits { return c.limits.WithDefaults() }

// checkLocalRepositories cleans the allowed local repository directories
// and refuses a relative one, or one that is, contains or is inside the
// cache directory (deputy's mirrors of every tenant's repositories).
func checkLocalRepositories(dirs []string, cacheDir string) ([]string, error) {
	cache, err := filepath.Abs(cacheDir)
	if err != nil {
		return nil, fmt.Errorf("source: failed to make the cache directory absolute: %w", err)
	}
	realCache := cache
	if r, err := filepath.EvalSymlinks(cache); err == nil {
		realCache = r
	}
	out := make([]string, 0, len(dirs))
	for i, d := range dirs {
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("source: LocalRepositories[%d] %q is not an absolute directory", i, d)
		}
		d = filepath.Clean(d)
		real := d
		if r, err := filepath.EvalSymlinks(d); err == nil {
			real = r
		}
		if localrepo.Within(d, cache) || localrepo.Within(cache, d) || localrepo.Within(real, realCache) || localrepo.Within(realCache, real) {
			return nil, fmt.Errorf("source: LocalRepositories[%d] %q overlaps the cache directory %s (%s): list directories that hold only Git repositories", i, d, cache, FieldLocalRepositories)
		}
		out = append(out, d)
	}
	return out, nil
}

// CheckSupported returns the errors of a source deputy does not render:
// for a chart from a Helm repository or an OCI registry
// (spec.source.chart), a repoURL that is not https:// (http:// on
// loopback) or oci://HOST/PATH, a chart name that is not one, a
// targetRevision that is no version or semver constraint; for every source,
// spec.source.helm's errors (helm.Validate). It reads nothing: the sync
// engine calls it before any fetch.
func CheckSupported(src v1alpha1.ApplicationSource) error {
	if src.Chart != "" {
		return checkChartSource(src)
	}
	return helm.Validate(src.Helm)
}

// ErrHelm is the error of kustomize's helmCharts (HelmChartInflationGenerator).
var ErrHelm = errors.New("Helm charts inflated by kustomize are not supported by deputy; set spec.source.path to the chart's directory (deputy renders charts in Git with Helm) or render the chart to plain manifests")

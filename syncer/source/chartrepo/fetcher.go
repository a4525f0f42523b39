package chartrepo

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// Credential is the username and password of one repository: the one
// credential deputy matched for the chart's exact repository URL.
type Credential struct {
	Username string `json:"username"`
	Password string `json:"password"`
	// ConfigURL is the URL of the sync.repositories entry it comes from,
	// for messages (the username and password are never in one).
	ConfigURL string `json:"configURL"`
}

// Source is one chart to fetch: Argo CD's spec.source repoURL, chart and
// targetRevision.
type Source struct {
	// RepoURL is a Helm repository (https://HOST/PATH, http:// on loopback)
	// or an OCI repository (oci://HOST/PATH: the chart is HOST/PATH/CHART).
	RepoURL string `json:"repoURL"`
	// Chart is the chart's name.
	Chart string `json:"chart"`
	// Version is an exact version or a semver constraint ("1.2.*",
	// ">=1.0 <2"); "" is the newest stable version.
	Version string `json:"version,omitempty"`
}

// String names the chart in messages: "chart NAME VERSION from REPO".
func (s Source) String() string {
	v := s.Version
	if v == "" {
		v = "(newest stable)"
	}
	return fmt.Sprintf("chart %s %s from %s", s.Chart, v, s.RepoURL)
}

// Limits bound one fetch. Each exceeded limit is a *limit.Error naming its
// configuration field.
type Limits struct {
	// MaxFetchBytes bounds each response: index.yaml, an OCI manifest or
	// tag list, an archive.
	MaxFetchBytes int64
	// MaxFileBytes bounds one file of an unpacked chart; MaxRenderBytes all
	// of them; MaxFiles their number.
	MaxFileBytes   int64
	MaxRenderBytes int64
	MaxFiles       int
}

// Fetcher fetches charts for one render.
type Fetcher struct {
	// CacheDir holds archives by repository and digest
	// (REPO/sha256-HEX.tgz, see cachePath); "" caches nothing.
	CacheDir string
	Limits   Limits
	// Credential is sent to the origin (scheme, host, port) of
	// Source.RepoURL only (Fetch);
	// dependencies are fetched without credentials.
	Credential *Credential
	// Permitted reports whether the project permits a dependency's
	// repository (nil permits none).
	Permitted func(repoURL string) bool
	// Project names the project in messages.
	Project string
	// CheckURL refuses a repository URL that is not one deputy fetches
	// (source's checkRemoteURL: one reading, no user info, no dot
	// segments); nil accepts every URL that parses.
	CheckURL func(raw string) error
	// Transport is the HTTP transport under the fetch's own (nil: net/http's
	// default as the process started).
	Transport http.RoundTripper

	// mu guards the unpacked size and entries of every chart this Fetcher
	// fetched: one render's chart and its dependencies, which count
	// together against Limits.MaxRenderBytes and MaxFiles (a Fetcher
	// serves one render).
	mu            sync.Mutex
	unpackedBytes int64
	unpackedFiles int
}

// Chart is a fetched chart: its resolved version, its archive's digest and
// its files (paths relative to the chart's directory).
type Chart struct {
	// Version is the version the source resolved to.
	Version string
	// Digest is the archive's sha256 (hex), "" when the index gives none.
	Digest string
	// Files are the chart's files as loader.LoadArchiveFiles returns them.
	Files []*loader.BufferedFile
}

// CheckSource checks a chart source without fetching anything: the chart
// name is one path segment, the version an exact version or a semver
// constraint. repoURL is checked by the caller. Errors name the field and
// the fix.
func CheckSource(s Source) error {
	if s.Chart == "" || strings.ContainsAny(s.Chart, `/\ `) || s.Chart == "." || s.Chart == ".." || strings.HasPrefix(s.Chart, "-") {
		return fmt.Errorf("spec.source.chart %q is not a chart name: give the chart's name as its repository lists it (no '/', e.g. nginx)", s.Chart)
	}
	if s.Version != "" {
		if _, err := semver.NewConstraint(s.Version); err != nil {
			return fmt.Errorf("spec.source.targetRevision %q of chart %s is not a chart version or semver constraint: %v: use a version (1.2.3), a range (1.2.*, >=1.0 <2) or leave it empty for the newest stable version", s.Version, s.Chart, err)
		}
	}
	return nil
}

// Resolve returns the version of s that Fetch would fetch now (the index or
// the registry's tags are read; no archive).
func (f *Fetcher) Resolve(ctx context.Context, s Source) (string, error) {
	r, err := f.locate(ctx, s, f.Credential)
	if err != nil {
		return "", err
	}
	return r.version, nil
}

// Fetch resolves s's version, downloads its archive (or takes it from the
// cache when its digest is the one announced), verifies its sha256 and
// unpacks it within the limits.
func (f *Fetcher) Fetch(ctx context.Context, s Source) (*Chart, error) {
	return f.fetch(ctx, s, f.Credential)
}

func (f *Fetcher) fetch(ctx context.Context, s Source, cred *Credential) (*Chart, error) {
	r, err := f.locate(ctx, s, cred)
	if err != nil {
		return nil, err
	}
	data, err := f.archive(ctx, s, cred, r)
	if err != nil {
		return nil, fmt.Errorf("%s (version %s): %w", s, r.version, err)
	}
	files, size, entries, err := unpack(data, f.Limits)
	if err == nil {
		err = f.charge(size, entries)
	}
	if err != nil {
		return nil, fmt.Errorf("%s (version %s): %w", s, r.version, err)
	}
	return &Chart{Version: r.version, Digest: r.digest, Files: files}, nil
}

// located is a resolved chart version: where its archive is and its digest.
type located struct {
	version string
	// digest is the archive's sha256 (hex) as announced, "" when the index
	// gives none.
	digest string
	// download fetches the archive (at most MaxFetchBytes).
	download func(ctx context.Context) ([]byte, error)
}

// locate resolves s in its Helm repository or OCI registry.
func (f *Fetcher) locate(ctx context.Context, s Source, cred *Credential) (*located, error) {
	if err := CheckSource(s); err != nil {
		return nil, err
	}
	if f.CheckURL != nil {
		if err := f.CheckURL(s.RepoURL); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(s.RepoURL)
	if err != nil {
		return nil, fmt.Errorf("%s: the repository URL does not parse: %w", s, err)
	}
	if u.Scheme == "oci" {
		return f.locateOCI(ctx, s, u, cred)
	}
	if err := checkScheme(u); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	return f.locateIndex(ctx, s, u, cred)
}

// credentialHint says what to fix when a repository answers 401 or 403.
func credentialHint(cred *Credential, repoURL string) string {
	if cred == nil {
		return fmt.Sprintf("no credential in deputy's sync.repositories covers %s: add one whose url is the repository's (or a prefix of it on a '/' boundary)", repoURL)
	}
	return fmt.Sprintf("the repository refused the credential of sync.repositories entry %s: check its username and password (usernameFile/passwordFile or Secret)", cred.ConfigURL)
}

// redirectedHint says why a server the repository redirected to got no
// credential.
func redirectedHint(host string) string {
	return fmt.Sprintf("%s redirected the request there, and deputy sends the repository's credential (and answers challenges) only to the repository itself: the repository must serve it, or redirect to a location that needs no credential", host)
}

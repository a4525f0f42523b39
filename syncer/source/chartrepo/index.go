package chartrepo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/repo"
)

// newestListed is how many versions an error lists when none matches.
const newestListed = 5

// locateIndex reads the Helm repository's index.yaml and resolves s's
// version as Helm does (repo.IndexFile.Get). The chart URL it names is
// resolved against the repository URL (repo.ResolveReferenceURL); it may be
// on another host or outside the repository's path, which get no
// credential.
func (f *Fetcher) locateIndex(ctx context.Context, s Source, u *url.URL, cred *Credential) (*located, error) {
	scope := scopeOf(u)
	client, t := newClient(f.Transport, cred, scope, u.Scheme == "https", f.Limits.MaxFetchBytes)
	indexURL := strings.TrimSuffix(s.RepoURL, "/") + "/index.yaml"
	data, err := get(ctx, client, t, indexURL, credentialHint(cred, s.RepoURL),
		"the repository has no index.yaml: check that spec.source.repoURL is a Helm repository (an OCI registry is written oci://HOST/PATH)")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	idx, err := loadIndex(data)
	if err != nil {
		return nil, fmt.Errorf("%s: the repository's index.yaml: %w: fix the repository", s, err)
	}
	cv, err := idx.Get(s.Chart, s.Version)
	if err != nil {
		return nil, versionError(s, err, idx)
	}
	if len(cv.URLs) == 0 {
		return nil, fmt.Errorf("%s: index.yaml lists version %s without a URL: fix the repository's index", s, cv.Version)
	}
	chartURL, err := repo.ResolveReferenceURL(s.RepoURL, cv.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("%s: version %s: %w", s, cv.Version, err)
	}
	cu, err := url.Parse(chartURL)
	if err != nil {
		return nil, fmt.Errorf("%s: version %s: the chart URL %q does not parse: %w", s, cv.Version, chartURL, err)
	}
	if err := checkScheme(cu); err != nil {
		return nil, fmt.Errorf("%s: version %s: %w", s, cv.Version, err)
	}
	if u.Scheme == "https" && cu.Scheme != "https" {
		return nil, fmt.Errorf("%s: version %s: the chart URL %s leaves https: an https repository's index.yaml must list https chart URLs (or relative ones): fix the repository", s, cv.Version, redact(cu))
	}
	digest := strings.TrimPrefix(strings.ToLower(cv.Digest), "sha256:")
	hint := credentialHint(cred, s.RepoURL)
	if cred != nil && !scope.covers(cu) {
		hint = fmt.Sprintf("the chart URL is outside spec.source.repoURL %s, so it gets no credential: the repository's index.yaml must list its archives at or below the repository's URL (e.g. relative URLs: charts/%s-%s.tgz)", s.RepoURL, s.Chart, cv.Version)
	}
	return &located{version: cv.Version, digest: digest, download: func(ctx context.Context) ([]byte, error) {
		return get(ctx, client, t, chartURL, hint, "the archive index.yaml names is missing: fix the repository")
	}}, nil
}

// loadIndex parses index.yaml with Helm's loader (repo.LoadIndexFile:
// defaults, validation and version order as Helm's; it reads a file only, so
// the bytes go through a temporary file of the render worker).
func loadIndex(data []byte) (*repo.IndexFile, error) {
	tmp, err := os.CreateTemp("", "index-*.yaml")
	if err != nil {
		return nil, fmt.Errorf("failed to write index.yaml to a temporary file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("failed to write index.yaml to a temporary file: %w", err)
	}
	idx, err := repo.LoadIndexFile(tmp.Name())
	if err != nil {
		// Helm names the temporary file: say index.yaml.
		return nil, errors.New(strings.ReplaceAll(err.Error(), "error loading "+tmp.Name()+": ", ""))
	}
	return idx, nil
}

// versionError explains why s's version was not found in idx.
func versionError(s Source, err error, idx *repo.IndexFile) error {
	if errors.Is(err, repo.ErrNoChartName) {
		return fmt.Errorf("%s: the repository's index has no chart %s: fix spec.source.chart (or spec.source.repoURL)%s", s, s.Chart, listNames(idx))
	}
	var versions []string
	for _, cv := range idx.Entries[s.Chart] {
		versions = append(versions, cv.Version)
	}
	return noVersionError(s, versions)
}

// noVersionError says no version of s matches, naming the newest few.
func noVersionError(s Source, versions []string) error {
	sorted := sortVersions(versions)
	more := ""
	if len(sorted) > newestListed {
		sorted, more = sorted[:newestListed], ", …"
	}
	avail := "none"
	if len(sorted) > 0 {
		avail = strings.Join(sorted, ", ") + more
	}
	return &noVersion{fmt.Sprintf("%s: no version matches %q (the newest are %s): fix spec.source.targetRevision", s, s.Version, avail)}
}

// noVersion is the error of a version or constraint nothing matches.
type noVersion struct{ msg string }

func (e *noVersion) Error() string { return e.msg }

// sortVersions returns the semver versions of vs, newest first (others
// dropped).
func sortVersions(vs []string) []string {
	var parsed []*semver.Version
	for _, v := range vs {
		if sv, err := semver.NewVersion(v); err == nil {
			parsed = append(parsed, sv)
		}
	}
	sort.Sort(sort.Reverse(semver.Collection(parsed)))
	out := make([]string, len(parsed))
	for i, v := range parsed {
		out[i] = v.Original()
	}
	return out
}

// listNames is ": the index has a, b, c" (the first few, sorted), or "".
func listNames(idx *repo.IndexFile) string {
	var names []string
	for n := range idx.Entries {
		names = append(names, n)
	}
	if len(names) == 0 {
		return ": the index lists no chart"
	}
	sort.Strings(names)
	more := ""
	if len(names) > 10 {
		names, more = names[:10], ", …"
	}
	return "; the index has " + strings.Join(names, ", ") + more
}

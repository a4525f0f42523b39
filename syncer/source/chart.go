package source

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/source/chartrepo"
	"deputy.dev/deputy/syncer/source/helm"
)

// This file holds charts from Helm repositories and OCI registries
// (spec.source.chart): deputy checks the source, matches the one
// credential of the repository's exact URL, and hands both to a render
// worker, which fetches, verifies, caches and renders (package chartrepo).

// WithProject gives Render the Application's project name and
// spec.sourceRepos: a chart's remote dependencies (Chart.yaml repositories
// https:// or oci:// that charts/ lacks) are fetched only from
// repositories these permit, matched as the Application's repoURL is.
// Without it no remote dependency is fetched.
func WithProject(name string, sourceRepos []string) RenderOption {
	return func(o *renderOptions) { o.project, o.sourceRepos = name, sourceRepos }
}

// workerChart is a chart for a render worker to fetch.
type workerChart struct {
	Source chartrepo.Source `json:"source"`
	// Credential is the one credential that covers Source.RepoURL. It
	// travels on the worker's stdin only (never its arguments, environment
	// or any message).
	Credential *chartrepo.Credential `json:"credential,omitempty"`
	// ResolveOnly asks for the version only (ResolveRevision).
	ResolveOnly bool `json:"resolveOnly,omitempty"`
}

// checkChartSource checks a chart source without fetching: repoURL an
// https:// Helm repository (http:// on loopback) or oci://HOST/PATH with
// one reading (checkRemoteURL), the chart's name and version
// (chartrepo.CheckSource), spec.source.helm.
func checkChartSource(src v1alpha1.ApplicationSource) error {
	if err := checkChartURL(src.RepoURL); err != nil {
		return err
	}
	if err := chartrepo.CheckSource(chartrepo.Source{RepoURL: src.RepoURL, Chart: src.Chart, Version: src.TargetRevision}); err != nil {
		return err
	}
	return helm.Validate(src.Helm)
}

// checkChartURL accepts a chart repository URL deputy fetches: https://
// (http:// to loopback only) or oci://, with checkRemoteURL's one reading.
// Render workers check dependency repositories with it too.
func checkChartURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("spec.source.repoURL %q does not parse: give an https:// Helm repository or an oci://HOST/PATH registry", redactRaw(raw))
	}
	switch {
	case u.Scheme == "http" && !loopback(u.Hostname()):
		return fmt.Errorf("spec.source.repoURL %q is plain http: deputy fetches charts over https (http only from loopback)", redactURL(u))
	case u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "oci":
		return fmt.Errorf("spec.source.repoURL %q of a chart source is not supported: use an https:// Helm repository or oci://HOST/PATH for an OCI registry", redactURL(u))
	}
	return checkRemoteURL(u, raw)
}

// chartRequest is the worker request for src's chart at version.
func (c *Cache) chartRequest(ctx context.Context, src v1alpha1.ApplicationSource, version string, o renderOptions) (workerRequest, error) {
	cs := chartrepo.Source{RepoURL: src.RepoURL, Chart: src.Chart, Version: version}
	var cred *chartrepo.Credential
	auth, err := c.auth(ctx, src.RepoURL)
	if err != nil {
		return workerRequest{}, fmt.Errorf("%s: %w", cs, err)
	}
	if ba, ok := auth.(*githttp.BasicAuth); ok {
		cred = &chartrepo.Credential{Username: ba.Username, Password: ba.Password, ConfigURL: c.creds[matchCredential(c.creds, src.RepoURL)].URL}
	}
	l := c.limits.WithDefaults()
	req := workerRequest{Chart: &workerChart{Source: cs, Credential: cred}, SourcePath: cs.String(), Helm: src.Helm, Limits: l, Kustomize: c.kustomize,
		ChartCache: filepath.Join(c.dir, "charts"), Project: o.project, SourceRepos: o.sourceRepos}
	if d, ok := ctx.Deadline(); ok {
		req.Deadline = d
	}
	return req, nil
}

// renderChart renders src's chart at revision (else its targetRevision)
// in a render worker; Rendered.Revision is the resolved chart version.
func (c *Cache) renderChart(ctx context.Context, src v1alpha1.ApplicationSource, revision string, o renderOptions) (*Rendered, error) {
	if revision == "" {
		revision = src.TargetRevision
	}
	req, err := c.chartRequest(ctx, src, revision, o)
	if err != nil {
		return nil, err
	}
	// A chart from a repository reads $REF/path values files from the
	// ref sources' Git repositories (spec.sources), as a chart in Git does.
	release, err := c.openRefs(ctx, nil, "", o.refs, &req)
	if err != nil {
		return nil, err
	}
	defer release()
	if req.Limits, err = o.remaining(req.Limits); err != nil {
		return nil, err
	}
	objs, stats, err := c.worker.run(ctx, req)
	out := &Rendered{Objects: objs, worker: stats}
	if stats != nil {
		out.Revision, out.Bytes = stats.Revision, stats.Bytes
	}
	return out, err
}

// resolveChart returns the chart version src's targetRevision resolves to
// now, read by a render worker.
func (c *Cache) resolveChart(ctx context.Context, src v1alpha1.ApplicationSource) (string, error) {
	req, err := c.chartRequest(ctx, src, src.TargetRevision, renderOptions{})
	if err != nil {
		return "", err
	}
	req.Chart.ResolveOnly = true
	_, stats, err := c.worker.run(ctx, req)
	if err != nil {
		return "", err
	}
	return stats.Revision, nil
}

// chartFetcher is a render worker's chartrepo.Fetcher for req: the chart's
// credential (when req is a chart's), the cache, the limits, the project's
// sourceRepos for dependencies.
func chartFetcher(req workerRequest, l Limits) *chartrepo.Fetcher {
	f := &chartrepo.Fetcher{CacheDir: req.ChartCache, Project: req.Project, CheckURL: checkChartURL,
		Permitted: chartrepo.PermittedBy(req.Project, req.SourceRepos),
		Limits:    chartrepo.Limits{MaxFetchBytes: l.MaxFetchBytes, MaxFileBytes: l.MaxFileBytes, MaxRenderBytes: l.MaxRenderBytes, MaxFiles: l.MaxFiles}}
	if req.Chart != nil {
		f.Credential = req.Chart.Credential
	}
	return f
}

// workerRenderChart is a render worker's chart render: fetch, then render
// with Helm as a chart from Git renders. It returns the chart's version.
func workerRenderChart(ctx context.Context, req workerRequest, budget *renderBudget, started func(string), emit func([]byte) error) (string, error) {
	f := chartFetcher(req, budget.limits)
	started(workerHelm)
	if req.Chart.ResolveOnly {
		return f.Resolve(ctx, req.Chart.Source)
	}
	ch, err := f.Fetch(ctx, req.Chart.Source)
	if err != nil {
		return "", err
	}
	refs, err := openWorkerRefs(req.Refs, budget)
	if err != nil {
		return ch.Version, err
	}
	s := req.Chart.Source
	objs, err := helm.Render(ctx, helm.Options{Archive: ch.Files, Label: fmt.Sprintf("chart %s %s from %s", s.Chart, ch.Version, s.RepoURL), Source: req.Helm,
		CountObjects: budget.objects, Dependency: dependencies(ctx, f), Refs: refs})
	if err != nil {
		return ch.Version, err
	}
	return ch.Version, emitObjects(objs, emit)
}

// dependencies is f's Dependency as Helm's render calls it.
func dependencies(ctx context.Context, f *chartrepo.Fetcher) helm.DependencyFunc {
	return func(owner string, d *chart.Dependency) ([]*loader.BufferedFile, error) {
		return f.Dependency(ctx, owner, d)
	}
}

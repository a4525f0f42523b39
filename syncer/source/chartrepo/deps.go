package chartrepo

import (
	"context"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// PermittedBy reports what a project's spec.sourceRepos permit, exactly as
// the sync engine checks an Application's repoURL: the patterns compiled
// by policy.CompileAppProject, matched by CompiledProject.SourcePermitted.
// A project that does not compile permits nothing.
func PermittedBy(project string, sourceRepos []string) func(repoURL string) bool {
	c, err := policy.CompileAppProject(&v1alpha1.AppProject{Spec: v1alpha1.AppProjectSpec{SourceRepos: sourceRepos}})
	if err != nil {
		return func(string) bool { return false }
	}
	return c.SourcePermitted
}

// Dependency fetches a Chart.yaml dependency of the chart named by owner
// that its charts/ lacks, as `helm dependency build` would: from its
// repository (https:// Helm repository or oci:// registry), the version
// its constraint resolves to, without any credential. The repository must
// be permitted by the project (Permitted). Repository names and aliases
// ("@name", "alias:name": Helm's local repository configuration, which
// deputy has none of) and file:// (only a chart in Git has a directory
// around it) are refused, naming the fix.
func (f *Fetcher) Dependency(ctx context.Context, owner string, d *chart.Dependency) ([]*loader.BufferedFile, error) {
	where := fmt.Sprintf("%s: Chart.yaml dependency %s (repository %q)", owner, d.Name, d.Repository)
	r := d.Repository
	switch {
	case r == "":
		return nil, fmt.Errorf("%s: it names no repository and charts/ does not hold it: vendor it under charts/ or give its repository URL", where)
	case strings.HasPrefix(r, "@") || strings.HasPrefix(r, "alias:"):
		return nil, fmt.Errorf("%s: a repository name refers to Helm's local repository list, which deputy does not have: write the repository's https:// or oci:// URL", where)
	case strings.HasPrefix(r, "file://"):
		return nil, fmt.Errorf("%s: a file:// dependency of a chart downloaded from a repository has no directory to come from: vendor it in the chart's archive (charts/)", where)
	case !strings.HasPrefix(r, "https://") && !strings.HasPrefix(r, "http://") && !strings.HasPrefix(r, "oci://"):
		return nil, fmt.Errorf("%s: only https:// Helm repositories and oci:// registries are fetched: fix the repository or vendor the chart under charts/", where)
	}
	if f.Project == "" {
		return nil, fmt.Errorf("%s: this render names no AppProject, whose spec.sourceRepos would have to permit the repository: vendor the chart under charts/", where)
	}
	if f.Permitted == nil || !f.Permitted(r) {
		return nil, fmt.Errorf("%s: the repository is not permitted in project '%s': add it (or a glob matching it) to the AppProject's spec.sourceRepos, or vendor the chart under charts/", where, f.Project)
	}
	ch, err := f.fetch(ctx, Source{RepoURL: r, Chart: d.Name, Version: d.Version}, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return ch.Files, nil
}

package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/konfig"

	"deputy.dev/deputy/internal/manifest"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/source/helm"
)

// maxSymlinkDepth bounds how many symbolic links resolving one path may
// follow (a loop would otherwise never end).
const maxSymlinkDepth = 16

// Rendered is an Application's manifests at one commit.
type Rendered struct {
	// Revision is the commit SHA the manifests come from (a chart from a
	// Helm repository or an OCI registry: the chart's version, as Argo CD
	// records it).
	Revision string
	// Objects are the rendered objects, in the render's order (plain
	// manifests: files in lexical order of their paths, documents in file
	// order; kustomize: its output's order).
	Objects []*unstructured.Unstructured
	// Bytes is the objects' estimated size in memory (what counts against
	// Limits.MaxRenderBytes).
	Bytes int64
	// worker is what the render worker reported about itself.
	worker *workerStats
}

// Render fetches the source's repository, resolves revision (the
// operation's override, else the source's targetRevision, else HEAD) and
// renders the manifests under the source's path at that commit in a render
// worker (render_worker.go: a child process whose memory is bounded by
// Limits.MaxRenderMemory; renderCommit there), with the repository locked
// against a concurrent fetch until the worker has ended. The objects come
// back within Limits.MaxRenderBytes and MaxObjects.
//
// A chart source (spec.source.chart) is fetched and rendered by the render
// worker (chart.go, package chartrepo): revision, else targetRevision, is
// its version or semver constraint; its remote dependencies are fetched
// only from repositories WithProject's sourceRepos permit.
//
// Errors: an invalid chart source or spec.source.helm, a path that leaves the repository, a
// repository that cannot be opened or fetched (naming it), a revision that
// does not exist there, a limit exceeded (a *LimitError naming its
// configuration field), or the render's own error. When the revision was
// resolved, the returned Rendered carries it even with an error.
//
// WithRefs gives the ref sources (spec.sources) whose repositories the
// Helm source's $REF/path files read, each at its Revision; the worker reads
// them through the same budget (sources.go).
func (c *Cache) Render(ctx context.Context, src v1alpha1.ApplicationSource, revision string, opts ...RenderOption) (*Rendered, error) {
	if err := CheckSupported(src); err != nil {
		return nil, err
	}
	var o renderOptions
	for _, opt := range opts {
		opt(&o)
	}
	defer c.lockRefs(src.RepoURL, o.refs)()
	if src.Chart != "" {
		return c.renderChart(ctx, src, revision, o)
	}
	if revision == "" {
		revision = src.TargetRevision
	}
	dir, err := cleanSourcePath(src.Path)
	if err != nil {
		return nil, err
	}
	opened, err := c.open(ctx, src.RepoURL)
	if err != nil {
		return nil, err
	}
	defer opened.release()

	commit, err := resolveRevision(opened.repo, revision)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.RepoURL, err)
	}
	out := &Rendered{Revision: commit.Hash.String()}
	req := workerRequest{Repo: opened.where, Commit: out.Revision, SourcePath: src.Path, Dir: dir, Helm: src.Helm, Limits: c.limits.WithDefaults(), Kustomize: c.kustomize,
		ChartCache: filepath.Join(c.dir, "charts"), Project: o.project, SourceRepos: o.sourceRepos}
	if d, ok := ctx.Deadline(); ok {
		req.Deadline = d
	}
	release, err := c.openRefs(ctx, opened, src.RepoURL, o.refs, &req)
	if err != nil {
		return out, err
	}
	defer release()
	if req.Limits, err = o.remaining(req.Limits); err != nil {
		return out, err
	}
	out.Objects, out.worker, err = c.worker.run(ctx, req)
	if out.worker != nil {
		out.Bytes = out.worker.Bytes
	}
	return out, err
}

// renderCommit renders the manifests under dir (repository-relative; the
// Application's spec.source.path is sourcePath) at commit, in a render
// worker: `kustomize build` when the directory holds a kustomization, else
// every .yaml, .yml and .json file below it (recursively, hidden files and
// directories skipped) in lexical order of their paths, every YAML document
// of each. Everything is read lazily from the Git objects through gitFS,
// within budget. started is called with workerKustomize or workerManifests
// once the kind of render is known; each object is passed to emit as JSON.
// A chart's remote dependencies come through deps; refs are the ref
// sources' repositories ($REF/path value files).
func renderCommit(repo *git.Repository, commit *object.Commit, repoURL, sourcePath, dir string, hs *v1alpha1.HelmSource, refs map[string]helm.Files, budget *renderBudget, kopts KustomizeOptions, deps helm.DependencyFunc, started func(kind string), emit func([]byte) error) error {
	rev := commit.Hash.String()
	if err := checkObjectSize(repo, commit.TreeHash, plumbing.TreeObject, "the root tree", budget); err != nil {
		return err
	}
	root, err := commit.Tree()
	if err != nil {
		return fmt.Errorf("failed to read the tree of %s: %w", rev, err)
	}
	gfs := newGitFS(repo, root, budget)
	sub, err := gfs.resolve(dir)
	if err != nil && (isLimitError(err) || budget.ctx.Err() != nil) {
		return err
	}
	if err != nil || !sub.isDir() {
		return fmt.Errorf("path %q does not exist (or is not a directory) in %s at %s: fix spec.source.path", sourcePath, repoURL, short(rev))
	}
	hasKustomization := false
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if n, err := gfs.resolve(path.Join(sub.rel, name)); err == nil && !n.isDir() {
			hasKustomization = true
		}
	}
	if !hasKustomization {
		var objs []*unstructured.Unstructured
		if _, ferr := sub.tree.FindEntry("Chart.yaml"); ferr == nil {
			started(workerHelm)
			objs, err = helm.Render(budget.ctx, helm.Options{Files: gfs, Refs: refs, ChartDir: sub.rel, Source: hs, CountObjects: budget.objects, Dependency: deps})
		} else if helm.Configured(hs) {
			return fmt.Errorf("spec.source.helm is set but path %q holds no Chart.yaml: set spec.source.path to the chart's directory or remove spec.source.helm", sourcePath)
		} else {
			started(workerManifests)
			objs, err = renderPlain(gfs, sub)
		}
		if err != nil {
			return err
		}
		return emitObjects(objs, emit)
	}
	started(workerKustomize)
	if kopts.RemoteResources {
		gfs.disk = kustomizeCloneDirs()
	}
	if err := kustomizeBuild(gfs, sub.rel, kopts, emit); err != nil {
		return fmt.Errorf("%s: %w", renderLabel(workerKustomize, sourcePath, rev), err)
	}
	return nil
}

// emitObjects passes each object to emit as JSON.
func emitObjects(objs []*unstructured.Unstructured, emit func([]byte) error) error {
	for _, o := range objs {
		data, err := o.MarshalJSON()
		if err != nil {
			return fmt.Errorf("failed to encode %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if err := emit(data); err != nil {
			return err
		}
	}
	return nil
}

// renderLabel names a render in errors: "kustomize build PATH at SHA" for
// kind workerKustomize; a chart source (no commit) "helm template of
// chart NAME VERSION from REPO".
func renderLabel(kind, sourcePath, rev string) string {
	if rev == "" {
		return "helm template of " + sourcePath
	}
	switch kind {
	case workerKustomize:
		return fmt.Sprintf("kustomize build %s at %s", cmp.Or(sourcePath, "."), short(rev))
	case workerManifests:
		return fmt.Sprintf("the manifests under %s at %s", cmp.Or(sourcePath, "."), short(rev))
	case workerHelm:
		return fmt.Sprintf("helm template %s at %s", cmp.Or(sourcePath, "."), short(rev))
	}
	return fmt.Sprintf("the render of %s at %s", cmp.Or(sourcePath, "."), short(rev))
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// cleanSourcePath returns the slash-separated path relative to the
// repository root ("" for the root), refusing one that leaves it.
func cleanSourcePath(p string) (string, error) {
	if p == "" || p == "." || p == "/" {
		return "", nil
	}
	c := path.Clean(strings.TrimPrefix(p, "/"))
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("spec.source.path %q leaves the repository: use a path inside it", p)
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}

// renderPlain decodes every manifest file below sub: files in lexical order
// of their paths, symbolic links to files followed inside the repository.
func renderPlain(gfs *gitFS, sub *node) ([]*unstructured.Unstructured, error) {
	type file struct {
		name  string // relative to sub
		entry object.TreeEntry
	}
	var files []file
	var walk func(t *object.Tree, prefix string) error
	walk = func(t *object.Tree, prefix string) error {
		for _, e := range t.Entries {
			name := path.Join(prefix, e.Name)
			switch {
			case strings.HasPrefix(e.Name, "."), e.Mode == filemode.Submodule:
			case e.Mode == filemode.Dir:
				child, err := gfs.tree(e.Hash, path.Join(sub.rel, name))
				if err != nil {
					return err
				}
				if err := walk(child, name); err != nil {
					return err
				}
			case manifestFile(e.Name):
				files = append(files, file{name, e})
			}
		}
		return nil
	}
	if err := walk(sub.tree, ""); err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })

	var objs []*unstructured.Unstructured
	for _, f := range files {
		full := path.Join(sub.rel, f.name)
		n := &node{rel: full, entry: f.entry}
		if f.entry.Mode == filemode.Symlink {
			var err error
			if n, err = gfs.resolve(full); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("symbolic link %s points to a path that does not exist in the repository", full)
				}
				return nil, err
			}
			if n.isDir() {
				return nil, fmt.Errorf("symbolic link %s points to the directory %s: deputy follows links to files only", full, n.rel)
			}
		}
		data, err := gfs.readBlob(full, n.entry, gfs.budget.limits.MaxFileBytes, true)
		if err != nil {
			return nil, err
		}
		docs, err := manifest.Decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", full, err)
		}
		objs = append(objs, docs...)
		if err := gfs.budget.objects(len(objs)); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

func manifestFile(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// symlinkTarget resolves a link's target relative to the link's directory
// and refuses targets outside the repository.
func symlinkTarget(link, target string) (string, error) {
	if path.IsAbs(target) {
		return "", fmt.Errorf("symbolic link %s points to the absolute path %s: links must stay inside the repository", link, target)
	}
	p := path.Join(path.Dir(link), target)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("symbolic link %s points to %s, outside the repository: links must stay inside it", link, target)
	}
	if p == "." {
		p = ""
	}
	return p, nil
}

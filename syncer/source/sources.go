package source

import (
	"context"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"

	"deputy.dev/deputy/syncer/source/helm"
)

// Ref is a source of spec.sources (with ref) whose repository a Helm
// source's "$REF/path" value files and file parameters read from.
type Ref struct {
	// Name is the source's ref.
	Name string
	// RepoURL is the source's repository.
	RepoURL string
	// Revision is the commit SHA (or any revision) to read it at: the sync
	// engine resolves every source once and passes the same SHA to each
	// render that reads it.
	Revision string
}

// RenderOption configures one Cache.Render.
type RenderOption func(*renderOptions)

// renderOptions are what RenderOptions set.
type renderOptions struct {
	// refs are the ref sources the Helm source's $REF/path files read.
	refs []Ref
	// usedObjects and usedBytes are held by earlier renders of the same
	// operation (WithUsed).
	usedObjects int
	usedBytes   int64
	// project and sourceRepos are the Application's project and its
	// spec.sourceRepos (WithProject, chart.go).
	project     string
	sourceRepos []string
}

// WithUsed says that earlier renders of the same operation hold objects
// objects of bytes bytes (their Rendered.Objects and Bytes): this render
// gets what is left of Limits.MaxObjects and MaxRenderBytes, so that an
// Application's sources, however many, stay within them together.
func WithUsed(objects int, bytes int64) RenderOption {
	return func(o *renderOptions) { o.usedObjects, o.usedBytes = objects, bytes }
}

// remaining is l less what earlier renders hold (WithUsed); a *LimitError
// when nothing is left.
func (o renderOptions) remaining(l Limits) (Limits, error) {
	l.MaxObjects -= o.usedObjects
	l.MaxRenderBytes -= o.usedBytes
	switch {
	case l.MaxObjects <= 0:
		return l, &LimitError{Field: FieldMaxObjects, What: "the object count of the Application's sources together", Limit: fmt.Sprint(l.MaxObjects + o.usedObjects)}
	case l.MaxRenderBytes <= 0:
		return l, renderBytesLimit(Limits{MaxRenderBytes: l.MaxRenderBytes + o.usedBytes})
	}
	return l, nil
}

// WithRefs gives Render the ref sources (spec.sources) whose repositories
// the Helm source's $REF/path value files and file parameters read, each
// at its Revision.
func WithRefs(refs ...Ref) RenderOption {
	return func(o *renderOptions) { o.refs = append(o.refs, refs...) }
}

// workerRef is a ref source's repository and commit for a render worker.
type workerRef struct {
	Repo   workerRepo `json:"repo"`
	Commit string     `json:"commit"`
}

// lockRefs serialises the renders that read repositories besides their
// own: each holds the locks of several mirrors, and taking them under one
// mutex means no two such renders wait for each other's (a render of one
// repository holds one lock and waits for none). It returns the unlock.
func (c *Cache) lockRefs(repoURL string, refs []Ref) func() {
	for _, r := range refs {
		if r.RepoURL != repoURL {
			c.refsMu.Lock()
			return c.refsMu.Unlock
		}
	}
	return func() {}
}

// openRefs opens the repositories of refs (the source's own, opened, is
// reused: a ref source may share its repository), resolves each ref's
// revision and puts them into req. The returned release unlocks what it
// opened. Errors name the ref and its repository.
func (c *Cache) openRefs(ctx context.Context, opened *openedRepo, repoURL string, refs []Ref, req *workerRequest) (func(), error) {
	repos := map[string]*openedRepo{}
	if opened != nil {
		repos[repoURL] = opened
	}
	var releases []func()
	release := func() {
		for _, r := range releases {
			r()
		}
	}
	for _, r := range refs {
		o, ok := repos[r.RepoURL]
		if !ok {
			var err error
			if o, err = c.open(ctx, r.RepoURL); err != nil {
				release()
				return nil, fmt.Errorf("the source whose ref is %s: %w", r.Name, err)
			}
			repos[r.RepoURL] = o
			releases = append(releases, o.release)
		}
		commit, err := resolveRevision(o.repo, r.Revision)
		if err != nil {
			release()
			return nil, fmt.Errorf("the source whose ref is %s (%s): %w", r.Name, r.RepoURL, err)
		}
		if req.Refs == nil {
			req.Refs = map[string]workerRef{}
		}
		req.Refs[r.Name] = workerRef{Repo: o.where, Commit: commit.Hash.String()}
	}
	return release, nil
}

// openWorkerRefs opens, in a render worker, the repositories of the ref
// sources at their commits as helm.Files charged to the render's budget
// (the same limits as the source's own files, symbolic links resolved
// inside each repository).
func openWorkerRefs(refs map[string]workerRef, budget *renderBudget) (map[string]helm.Files, error) {
	out := make(map[string]helm.Files, len(refs))
	for name, r := range refs {
		repo, err := r.Repo.open()
		if err != nil {
			return nil, err
		}
		commit, err := repo.CommitObject(plumbing.NewHash(r.Commit))
		if err != nil {
			return nil, fmt.Errorf("failed to read commit %s of %s (ref %s): %w", r.Commit, r.Repo.URL, name, err)
		}
		if err := checkObjectSize(repo, commit.TreeHash, plumbing.TreeObject, "the root tree of ref "+name, budget); err != nil {
			return nil, err
		}
		root, err := commit.Tree()
		if err != nil {
			return nil, fmt.Errorf("failed to read the tree of %s (ref %s): %w", r.Commit, name, err)
		}
		out[name] = newGitFS(repo, root, budget)
	}
	return out, nil
}

package source

import (
	"context"
	"fmt"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"deputy.dev/deputy/policy/v1alpha1"
)

// ResolveRevision fetches src's repository (as Render does, with the same
// credentials and mirror) and returns the full commit SHA its
// targetRevision (branch, tag, SHA, or HEAD when empty) points at now; for
// a chart source (spec.source.chart), the chart version its targetRevision
// resolves to now, read by a render worker as Render resolves it. The
// Application controller compares it with status.sync.revision to decide
// whether the source moved.
//
// The fetch is bounded as a render's is (Limits.MaxFetchBytes and
// MaxFileBytes) and takes at most Limits.OperationTimeout.
//
// Errors: an invalid source (CheckSupported), the repository cannot be
// fetched (naming it), a limit is exceeded (*LimitError), or the revision does not exist
// there.
func (c *Cache) ResolveRevision(ctx context.Context, src v1alpha1.ApplicationSource) (string, error) {
	if err := CheckSupported(src); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, c.limits.WithDefaults().OperationTimeout)
	defer cancel()
	if src.Chart != "" {
		return c.resolveChart(ctx, src)
	}
	opened, err := c.open(ctx, src.RepoURL)
	if err != nil {
		return "", err
	}
	defer opened.release()
	commit, err := resolveRevision(opened.repo, src.TargetRevision)
	if err != nil {
		return "", fmt.Errorf("%s: %w", src.RepoURL, err)
	}
	return commit.Hash.String(), nil
}

// resolveRevision resolves a branch, tag (annotated tags are peeled), full or
// abbreviated commit SHA, or HEAD ("" means HEAD) to a commit.
func resolveRevision(repo *git.Repository, revision string) (*object.Commit, error) {
	if revision == "" {
		revision = "HEAD"
	}
	h, err := repo.ResolveRevision(plumbing.Revision(revision))
	if err != nil {
		return nil, fmt.Errorf("revision %q not found: name a branch, a tag, a commit SHA or HEAD that exists in the repository", revision)
	}
	c, err := repo.CommitObject(*h)
	if err != nil {
		return nil, fmt.Errorf("revision %q (%s) is not a commit: %w", revision, h, err)
	}
	return c, nil
}

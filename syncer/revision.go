package syncer

import (
	"context"
	"fmt"

	"deputy.dev/deputy/policy/v1alpha1"
)

// ResolveRevision fetches app's repository (as a sync does, with the same
// credentials and cache) and returns the full commit SHA its
// spec.source.targetRevision (branch, tag, SHA, or HEAD when empty) points
// at now. The controller compares it with status.sync.revision to decide
// whether Git moved.
//
// The fetch is bounded as a sync's is (Limits.MaxFetchBytes and
// MaxFileBytes) and takes at most Limits.OperationTimeout.
//
// Errors: the repository cannot be fetched (naming it), a limit is exceeded
// (*LimitError), or the revision does not exist there.
func (e *Engine) ResolveRevision(ctx context.Context, app *v1alpha1.Application) (string, error) {
	if err := helmError(app.Spec.Source); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.Limits.OperationTimeout)
	defer cancel()
	opened, err := e.repos.open(ctx, app.Spec.Source.RepoURL)
	if err != nil {
		return "", err
	}
	defer opened.release()
	commit, err := resolveRevision(opened.repo, app.Spec.Source.TargetRevision)
	if err != nil {
		return "", fmt.Errorf("%s: %w", app.Spec.Source.RepoURL, err)
	}
	return commit.Hash.String(), nil
}

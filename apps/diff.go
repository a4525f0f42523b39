package apps

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// ErrDiffUnavailable matches Diff's error when this deputy cannot compute
// diffs: no Differ was given, or the sync engine could not be built
// (deputy's API answers 503).
var ErrDiffUnavailable = errors.New("diff not available")

// ErrTooManyDiffs matches Diff's error when as many diffs as the bound
// allows already run in this process (deputy's API answers 429 with
// Retry-After).
var ErrTooManyDiffs = errors.New("too many diffs in progress")

// diffGate runs diffs in the calling goroutine, at most cap(slots) at once:
// every diff renders in a render worker and dry-runs every object, so an
// unbounded number of them would exhaust the process.
type diffGate struct {
	differ syncer.Differ
	slots  chan struct{}
}

// newDiffGate bounds differ to limit diffs at once (0: DefaultWorkers).
func newDiffGate(differ syncer.Differ, limit int) *diffGate {
	if limit <= 0 {
		limit = DefaultWorkers
	}
	return &diffGate{differ: differ, slots: make(chan struct{}, limit)}
}

// diff is Applications.Diff for both modes: it needs no leader and no
// operations queue, only reads and dry-runs.
func (g *diffGate) diff(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, op v1alpha1.SyncOperation, objects []*unstructured.Unstructured) (*v1alpha1.ApplicationDiff, error) {
	if app == nil || project == nil {
		return nil, errors.New("failed to diff: an Application and its AppProject are required")
	}
	if g.differ == nil {
		return nil, fmt.Errorf("%w: this deputy has no sync engine", ErrDiffUnavailable)
	}
	if errs := op.Validate(field.NewPath("operation", "sync")); len(errs) > 0 {
		return nil, fmt.Errorf("%w of %s: %s", ErrInvalidSync, appKey(app.Namespace, app.Name), errs.ToAggregate().Error())
	}
	select {
	case g.slots <- struct{}{}:
	default:
		return nil, fmt.Errorf("%w: %d diffs already run in this deputy process (the bound is sync.parallelism); retry shortly", ErrTooManyDiffs, cap(g.slots))
	}
	defer func() { <-g.slots }()
	return g.differ.Diff(ctx, syncer.DiffRequest{Application: app.DeepCopy(), Project: project.DeepCopy(), Sync: op, Objects: objects})
}

package serve

import (
	"context"
	"errors"
	"strings"
	"testing"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

func TestUnavailableRunnerFailsEveryDiffWithTheReason(t *testing.T) {
	_, err := unavailableRunner{reason: "cannot create .deputy/repos"}.Diff(t.Context(), syncer.DiffRequest{Application: &v1alpha1.Application{}})
	if !errors.Is(err, apps.ErrDiffUnavailable) || !strings.Contains(err.Error(), "sync engine not available: cannot create .deputy/repos") {
		t.Errorf("Diff: %v", err)
	}
}

// runnerOnly runs and resolves, but cannot diff.
type runnerOnly struct{ unavailableRunner }

func (runnerOnly) Diff() {} // not syncer.Differ's signature

// differToo diffs as well.
type differToo struct{ unavailableRunner }

func (differToo) Diff(context.Context, syncer.DiffRequest) (*v1alpha1.ApplicationDiff, error) {
	return &v1alpha1.ApplicationDiff{Name: "diffed"}, nil
}

func TestWithDiffUsesTheEnginesDiffWhenItHasOne(t *testing.T) {
	if d, err := withDiff(differToo{}).Diff(t.Context(), syncer.DiffRequest{}); err != nil || d.Name != "diffed" {
		t.Errorf("an engine with Diff: %+v, %v", d, err)
	}
	e := withDiff(runnerOnly{unavailableRunner{reason: "r"}})
	if _, err := e.Diff(t.Context(), syncer.DiffRequest{}); !errors.Is(err, apps.ErrDiffUnavailable) {
		t.Errorf("an engine without Diff: %v, want apps.ErrDiffUnavailable", err)
	}
	if st := e.Run(t.Context(), syncer.Request{Application: &v1alpha1.Application{}}, nil); !strings.Contains(st.Message, "sync engine not available: r") {
		t.Errorf("Run does not reach the engine: %+v", st)
	}
	if _, err := e.ResolveRevisions(t.Context(), nil, nil); err == nil || !strings.Contains(err.Error(), "sync engine not available: r") {
		t.Errorf("ResolveRevisions does not reach the engine: %v", err)
	}
}

// TestTheEngineDiffs: syncer.Engine.Diff is written apart from this
// wiring; once it exists, deputy serve answers diffs with it.
func TestTheEngineDiffs(t *testing.T) {
	if _, ok := any(&syncer.Engine{}).(syncer.Differ); !ok {
		t.Skip("syncer.Engine has no Diff method yet: deputy's diff API answers 503 (apps.ErrDiffUnavailable) until it has")
	}
	if _, ok := withDiff(&syncer.Engine{}).(engineWithoutDiff); ok {
		t.Error("withDiff hides the engine's Diff")
	}
}

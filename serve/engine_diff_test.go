package serve

import (
	"errors"
	"strings"
	"testing"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

func TestUnavailableRunnerFailsEveryDiffAndComparisonWithTheReason(t *testing.T) {
	u := unavailableRunner{reason: "cannot create .deputy/repos"}
	_, err := u.Diff(t.Context(), syncer.DiffRequest{Application: &v1alpha1.Application{}})
	if !errors.Is(err, apps.ErrDiffUnavailable) || !strings.Contains(err.Error(), "sync engine not available: cannot create .deputy/repos") {
		t.Errorf("Diff: %v", err)
	}
	if _, err := u.Compare(t.Context(), &v1alpha1.Application{}, &v1alpha1.AppProject{}, nil); err == nil || !strings.Contains(err.Error(), "sync engine not available: cannot create .deputy/repos") {
		t.Errorf("Compare: %v", err)
	}
}

// The engine is what deputy serve wires into both modes.
var _ syncEngine = (*syncer.Engine)(nil)

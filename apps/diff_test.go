package apps_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// gatedDiffer answers every diff once release is closed (or its context
// ends); started receives each request as it begins.
type gatedDiffer struct {
	started chan syncer.DiffRequest
	release chan struct{}
}

func newGatedDiffer() *gatedDiffer {
	return &gatedDiffer{started: make(chan syncer.DiffRequest, 10), release: make(chan struct{})}
}

func (d *gatedDiffer) Diff(ctx context.Context, req syncer.DiffRequest) (*v1alpha1.ApplicationDiff, error) {
	d.started <- req
	select {
	case <-d.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &v1alpha1.ApplicationDiff{Namespace: req.Application.Namespace, Name: req.Application.Name,
		Resources: []v1alpha1.ResourceDiff{{Version: "v1", Kind: "ConfigMap", Name: "c", Action: v1alpha1.DiffActionUnchanged}}}, nil
}

// fileDiff is a diff of guestbook/manual through f.
func fileDiff(t *testing.T, f apps.Applications, op v1alpha1.SyncOperation) (*v1alpha1.ApplicationDiff, error) {
	t.Helper()
	app, err := f.Application("guestbook", "manual")
	if err != nil || app == nil {
		t.Fatalf("Application: %v, %v", app, err)
	}
	project, err := f.AppProject(app)
	if err != nil {
		t.Fatal(err)
	}
	return f.Diff(t.Context(), app, project, op, nil)
}

func TestDiffRunsAtMostWorkersAtOnceAndAnswersTooManyBeyond(t *testing.T) {
	snap := loadFilePolicy(t)
	differ := newGatedDiffer()
	f := apps.NewFile(apps.FileOptions{Snapshot: func() *policy.Snapshot { return snap }, ProjectNamespaces: []string{"guestbook"},
		Runner: &recordingRunner{}, Differ: differ, Workers: 2})
	type result struct {
		d   *v1alpha1.ApplicationDiff
		err error
	}
	results := make(chan result, 2)
	app := snap.Application("guestbook", "manual").Object
	project := snap.DeputyAppProject("guestbook", "guestbook")
	// A local diff's objects reach the Differ (syncer.DiffRequest.Objects).
	local := []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}}}}
	for range 2 {
		go func() {
			d, err := f.Diff(t.Context(), app, project, v1alpha1.SyncOperation{Revision: "v2"}, local)
			results <- result{d, err}
		}()
	}
	for range 2 {
		select {
		case req := <-differ.started:
			if req.Application.Name != "manual" || req.Project.Name != "guestbook" || req.Sync.Revision != "v2" || len(req.Objects) != 1 || req.Objects[0].GetName() != "c" {
				t.Errorf("request %+v", req)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the diffs did not start")
		}
	}
	_, err := fileDiff(t, f, v1alpha1.SyncOperation{})
	if !errors.Is(err, apps.ErrTooManyDiffs) || !strings.Contains(err.Error(), "2 diffs already run") {
		t.Fatalf("a third diff: %v, want ErrTooManyDiffs naming the bound", err)
	}
	close(differ.release)
	for range 2 {
		if r := <-results; r.err != nil || r.d.Name != "manual" {
			t.Errorf("diff: %+v, %v", r.d, r.err)
		}
	}
	// The slots are free again; a diff runs while no sync does (and none was started).
	if _, err := fileDiff(t, f, v1alpha1.SyncOperation{}); err != nil {
		t.Errorf("a diff after the others ended: %v", err)
	}
	if f.Running("guestbook", "manual") {
		t.Error("a diff started an operation")
	}
}

func TestDiffErrors(t *testing.T) {
	snap := loadFilePolicy(t)
	current := func() *policy.Snapshot { return snap }
	without := apps.NewFile(apps.FileOptions{Snapshot: current, ProjectNamespaces: []string{"guestbook"}, Runner: &recordingRunner{}})
	if _, err := fileDiff(t, without, v1alpha1.SyncOperation{}); !errors.Is(err, apps.ErrDiffUnavailable) {
		t.Errorf("without a Differ: %v, want ErrDiffUnavailable", err)
	}
	differ := newGatedDiffer()
	close(differ.release)
	f := apps.NewFile(apps.FileOptions{Snapshot: current, ProjectNamespaces: []string{"guestbook"}, Runner: &recordingRunner{}, Differ: differ})
	if _, err := fileDiff(t, f, v1alpha1.SyncOperation{HealthTimeout: "later"}); !errors.Is(err, apps.ErrInvalidSync) || !strings.Contains(err.Error(), "operation.sync.healthTimeout") {
		t.Errorf("an invalid operation: %v, want ErrInvalidSync naming the field", err)
	}
	if _, err := f.Diff(t.Context(), nil, nil, v1alpha1.SyncOperation{}, nil); err == nil {
		t.Error("a diff without an Application succeeded")
	}
	if len(differ.started) != 0 {
		t.Errorf("%d refused diffs reached the Differ", len(differ.started))
	}
}

// TestControllerDiffsWithoutLeading: cluster mode answers a diff on any
// replica, before (and without) running: no Lease, no informer.
func TestControllerDiffsWithoutLeading(t *testing.T) {
	snap := loadFilePolicy(t)
	differ := newGatedDiffer()
	close(differ.release)
	c, err := apps.NewController(apps.ControllerOptions{
		Config: &rest.Config{Host: "https://127.0.0.1:1"}, Runner: &recordingRunner{}, Revisions: noRevisions{}, Differ: differ,
		Projects:       func(*v1alpha1.Application) (*v1alpha1.AppProject, error) { return nil, errors.New("unused") },
		LeaderElection: apps.LeaderElectionOptions{Namespace: "deputy-system", Name: "deputy"},
	})
	if err != nil {
		t.Fatal(err)
	}
	app := snap.Application("guestbook", "manual").Object
	project := snap.DeputyAppProject("guestbook", "guestbook")
	d, err := c.Diff(t.Context(), app, project, v1alpha1.SyncOperation{}, nil)
	if err != nil || d.Name != "manual" || c.IsLeader() {
		t.Errorf("Diff = %+v, %v (leader %v)", d, err, c.IsLeader())
	}
}

type noRevisions struct{}

func (noRevisions) ResolveRevisions(context.Context, *v1alpha1.Application, *v1alpha1.AppProject) ([]string, error) {
	return nil, errors.New("unused")
}

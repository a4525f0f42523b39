package apps_test

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/apps/gitpush"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// filePolicy has one project, an automated Application with prune, a manual
// one, and an automated one whose project does not exist.
var filePolicy = []policy.SourceFile{{Name: "apps.yaml", Data: []byte(`apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: guestbook, namespace: guestbook}
spec:
  sourceRepos: ["*"]
  destinations: [{server: https://kubernetes.default.svc, namespace: guestbook}]
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: auto, namespace: guestbook}
spec:
  project: guestbook
  source: {repoURL: https://github.com/org/repo.git, targetRevision: main}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
  syncPolicy: {automated: {prune: true}}
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: manual, namespace: guestbook}
spec:
  project: guestbook
  source: {repoURL: https://github.com/org/repo.git, targetRevision: main}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: orphan, namespace: guestbook}
spec:
  project: missing
  source: {repoURL: https://github.com/org/repo.git, targetRevision: main}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
  syncPolicy: {automated: {}}
`)}}

// recordingRunner succeeds at once and records every request.
type recordingRunner struct {
	mu   sync.Mutex
	reqs []syncer.Request
}

func (r *recordingRunner) Run(_ context.Context, req syncer.Request, _ syncer.Progress) *v1alpha1.OperationState {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	now := metav1.Now()
	return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, FinishedAt: &now,
		SyncResult: &v1alpha1.SyncOperationResult{Revision: "0123abc"}}
}

func (r *recordingRunner) requests() []syncer.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

func newFile(t *testing.T, snap *policy.Snapshot) (*apps.File, *recordingRunner) {
	t.Helper()
	runner := &recordingRunner{}
	f := apps.NewFile(apps.FileOptions{Snapshot: func() *policy.Snapshot { return snap },
		ProjectNamespaces: []string{"guestbook"}, Runner: runner})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.Shutdown(ctx)
	})
	return f, runner
}

func loadFilePolicy(t *testing.T) *policy.Snapshot {
	t.Helper()
	snap, err := policy.Load(filePolicy)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func waitIdle(t *testing.T, f *apps.File, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.Running(ns, name) {
		if time.Now().After(deadline) {
			t.Fatalf("the operation of %s/%s did not end", ns, name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFileModeAnswersNotLoadedBeforeThePolicyLoads(t *testing.T) {
	f, _ := newFile(t, nil)
	if _, err := f.Application("guestbook", "auto"); !errors.Is(err, policy.ErrNotLoaded) {
		t.Errorf("Application: %v, want policy.ErrNotLoaded", err)
	}
	if _, err := f.List(); !errors.Is(err, policy.ErrNotLoaded) {
		t.Errorf("List: %v, want policy.ErrNotLoaded", err)
	}
	app := &v1alpha1.Application{Spec: v1alpha1.ApplicationSpec{Project: "guestbook"}}
	if _, err := f.AppProject(app); !errors.Is(err, policy.ErrNotLoaded) {
		t.Errorf("AppProject: %v, want policy.ErrNotLoaded", err)
	}
}

func TestFileModeFindsApplicationsAndTheirProjects(t *testing.T) {
	f, _ := newFile(t, loadFilePolicy(t))
	app, err := f.Application("guestbook", "auto")
	if err != nil || app == nil || app.Name != "auto" {
		t.Fatalf("Application = %v, %v; want guestbook/auto", app, err)
	}
	if missing, err := f.Application("guestbook", "nope"); missing != nil || err != nil {
		t.Errorf("Application of an unknown name = %v, %v; want nil, nil", missing, err)
	}
	p, err := f.AppProject(app)
	if err != nil || p.Name != "guestbook" {
		t.Errorf("AppProject = %v, %v; want guestbook", p, err)
	}
	orphan, _ := f.Application("guestbook", "orphan")
	if _, err := f.AppProject(orphan); !errors.Is(err, policy.ErrProjectNotUsable) {
		t.Errorf("AppProject of an Application whose project does not exist: %v, want policy.ErrProjectNotUsable", err)
	}
	list, err := f.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range list {
		names = append(names, a.Name)
	}
	sort.Strings(names)
	if !slices.Equal(names, []string{"auto", "manual", "orphan"}) {
		t.Errorf("List = %v", names)
	}
	if st := f.ApplicationStatus("guestbook", "auto"); st.Sync.Status != v1alpha1.SyncStatusCodeUnknown || st.OperationState != nil {
		t.Errorf("status before any operation = %+v, want Unknown without a state", st)
	}
}

func TestFileModeTriggerSyncsOnlyAutomatedApplicationsOfAUsableProject(t *testing.T) {
	f, runner := newFile(t, loadFilePolicy(t))
	push := gitpush.Push{Provider: "github"}
	auto, _ := f.Application("guestbook", "auto")
	manual, _ := f.Application("guestbook", "manual")
	orphan, _ := f.Application("guestbook", "orphan")

	if err := f.Trigger(t.Context(), manual, push); err != nil {
		t.Errorf("Trigger of a manual Application: %v, want nothing done", err)
	}
	if err := f.Trigger(t.Context(), orphan, push); !errors.Is(err, policy.ErrProjectNotUsable) {
		t.Errorf("Trigger of an Application whose project does not exist: %v, want policy.ErrProjectNotUsable", err)
	}
	if err := f.Trigger(t.Context(), auto, push); err != nil {
		t.Fatalf("Trigger of an automated Application: %v", err)
	}
	waitIdle(t, f, "guestbook", "auto")
	reqs := runner.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d operations ran, want 1 (the automated Application's)", len(reqs))
	}
	req := reqs[0]
	if req.Application.Name != "auto" || req.Project.Name != "guestbook" || !req.Sync.Prune ||
		req.InitiatedBy != (v1alpha1.InitiatedBy{Username: "git-webhook:github", Automated: true}) {
		t.Errorf("operation %s with project %s, sync %+v, initiated by %+v; want auto, guestbook, prune, automated by git-webhook:github",
			req.Application.Name, req.Project.Name, req.Sync, req.InitiatedBy)
	}
	st := f.ApplicationStatus("guestbook", "auto")
	if st.Sync.Status != v1alpha1.SyncStatusCodeSynced || st.Sync.Revision != "0123abc" {
		t.Errorf("sync status after the operation = %+v, want Synced at 0123abc", st.Sync)
	}
}

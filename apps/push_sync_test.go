package apps_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/apps/gitpush"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// fakeTargets is a PushTargets over a fixed list; Trigger returns what
// triggers holds for the Application (nil by default) and records the call.
type fakeTargets struct {
	apps     []*v1alpha1.Application
	listErr  error
	triggers map[string]error
	got      []string
}

func (f *fakeTargets) List() ([]*v1alpha1.Application, error) { return f.apps, f.listErr }

func (f *fakeTargets) Trigger(_ context.Context, app *v1alpha1.Application, _ gitpush.Push) error {
	key := app.Namespace + "/" + app.Name
	f.got = append(f.got, key)
	return f.triggers[key]
}

func pushApp(ns, name, repoURL, target string, automated bool) *v1alpha1.Application {
	a := &v1alpha1.Application{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.ApplicationSpec{Source: v1alpha1.ApplicationSource{RepoURL: repoURL, TargetRevision: target}},
	}
	if automated {
		a.Spec.SyncPolicy = &v1alpha1.SyncPolicy{Automated: &v1alpha1.SyncPolicyAutomated{}}
	}
	return a
}

func TestSyncPushTriggersTheAutomatedApplicationsThePushMoves(t *testing.T) {
	targets := &fakeTargets{
		apps: []*v1alpha1.Application{
			pushApp("b", "main", "git@github.com:org/repo.git", "main", true),
			pushApp("a", "head", "https://github.com/Org/Repo", "HEAD", true),
			pushApp("a", "busy", "https://github.com/org/repo", "refs/heads/main", true),
			pushApp("a", "down", "https://github.com/org/repo", "main", true),
			pushApp("a", "broken", "https://github.com/org/repo", "main", true),
			pushApp("a", "manual", "https://github.com/org/repo", "main", false),
			pushApp("a", "tag", "https://github.com/org/repo", "refs/tags/main", true),
			pushApp("a", "other-repo", "https://github.com/org/other", "main", true),
			pushApp("a", "other-branch", "https://github.com/org/repo", "dev", true),
			nil,
		},
		triggers: map[string]error{
			"a/busy":   apps.ErrOperationInProgress,
			"a/down":   apps.ErrShuttingDown,
			"a/broken": errors.New("the apiserver is unreachable"),
		},
	}
	push := gitpush.Push{Provider: "github", RepoURLs: []string{"https://github.com/org/repo"},
		Ref: "refs/heads/main", Revision: "main", RefType: gitpush.RefBranch, DefaultBranch: "main", TouchedHead: true}
	got, err := apps.SyncPush(t.Context(), targets, push)
	if err != nil {
		t.Fatal(err)
	}
	want := apps.PushResult{
		Triggered:         []string{"a/head", "b/main"},
		AlreadyInProgress: []string{"a/busy"},
		Manual:            []string{"a/manual"},
		Failed:            []string{"a/broken: the apiserver is unreachable", "a/down: " + apps.ErrShuttingDown.Error()},
		ShuttingDown:      true,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("result (-want +got):\n%s", d)
	}
	if len(targets.got) != 5 {
		t.Errorf("Trigger calls %v, want one per automated match (5), none for the manual one", targets.got)
	}
}

func TestSyncPushReturnsTheListError(t *testing.T) {
	targets := &fakeTargets{listErr: policy.ErrNotLoaded}
	if _, err := apps.SyncPush(t.Context(), targets, gitpush.Push{}); !errors.Is(err, policy.ErrNotLoaded) {
		t.Errorf("err = %v, want policy.ErrNotLoaded", err)
	}
}

func TestPushMatchesAndInitiator(t *testing.T) {
	push := gitpush.Push{Provider: "gitlab", RepoURLs: []string{"git@gitlab.example.com:group/repo.git"},
		Ref: "refs/tags/v1", Revision: "v1", RefType: gitpush.RefTag}
	if !push.Matches(pushApp("a", "x", "https://gitlab.example.com/group/repo", "v1", false)) {
		t.Error("a push does not match an Application of its repository at the pushed tag")
	}
	if push.Matches(pushApp("a", "x", "https://gitlab.example.com/group/repo", "refs/heads/v1", false)) {
		t.Error("a tag push matches an Application that tracks the branch of that name")
	}
	if got := push.Initiator(); got != "git-webhook:gitlab" {
		t.Errorf("Initiator = %q", got)
	}
}

// An Application with spec.sources is triggered by a push to the repository
// of any of its sources (a ref source's values included) at that source's
// targetRevision; its spec.source, empty, matches nothing.
func TestSyncPushMatchesAnySourceOfSpecSources(t *testing.T) {
	multi := func(name string, srcs ...v1alpha1.ApplicationSource) *v1alpha1.Application {
		a := pushApp("a", name, "", "", true)
		a.Spec.Sources = srcs
		return a
	}
	targets := &fakeTargets{apps: []*v1alpha1.Application{
		multi("values-ref", v1alpha1.ApplicationSource{RepoURL: "https://github.com/org/charts", TargetRevision: "main", Path: "web"},
			v1alpha1.ApplicationSource{RepoURL: "https://github.com/org/values", TargetRevision: "main", Ref: "values"}),
		multi("chart", v1alpha1.ApplicationSource{RepoURL: "https://github.com/org/values.git", TargetRevision: "HEAD", Path: "web"}),
		multi("other-branch", v1alpha1.ApplicationSource{RepoURL: "https://github.com/org/charts", TargetRevision: "main", Path: "web"},
			v1alpha1.ApplicationSource{RepoURL: "https://github.com/org/values", TargetRevision: "dev", Ref: "values"}),
		multi("unrelated", v1alpha1.ApplicationSource{RepoURL: "https://github.com/org/charts", TargetRevision: "main", Path: "web"}),
	}}
	push := gitpush.Push{Provider: "github", RepoURLs: []string{"https://github.com/org/values"},
		Ref: "refs/heads/main", Revision: "main", RefType: gitpush.RefBranch, DefaultBranch: "main", TouchedHead: true}
	got, err := apps.SyncPush(t.Context(), targets, push)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(apps.PushResult{Triggered: []string{"a/chart", "a/values-ref"}}, got); d != "" {
		t.Errorf("result (-want +got):\n%s", d)
	}
}

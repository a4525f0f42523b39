package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// watchSignal closes watching once a watch of an Application follows it.
type watchSignal struct {
	apps.Applications
	watching chan struct{}
	once     *sync.Once
}

func (w watchSignal) Watch(ctx context.Context, ns, name string) <-chan v1alpha1.OperationEvent {
	ch := w.Applications.Watch(ctx, ns, name)
	w.once.Do(func() { close(w.watching) })
	return ch
}

// flakyRun is guestbook/flaky's attempt, as the engine reports one: a
// PreSync hook running then succeeding, a Deployment reported twice while it
// progresses; the first attempt fails on the health timeout, the retry (its
// hook carried over from the first) succeeds with a healthy Deployment.
func flakyRun(ctx context.Context, watching chan struct{}, req syncer.Request, progress syncer.Progress) *v1alpha1.OperationState {
	select {
	case <-watching:
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
	}
	id := "system:serviceaccount:guestbook:guestbook-deployer"
	hook := func(phase, msg string) *v1alpha1.ResourceResult {
		return &v1alpha1.ResourceResult{Group: "batch", Version: "v1", Kind: "Job", Namespace: "guestbook", Name: "migrate", Status: v1alpha1.ResultCodeSynced,
			HookType: v1alpha1.SyncPhasePreSync, HookPhase: phase, SyncPhase: v1alpha1.SyncPhasePreSync, Message: msg}
	}
	deploy := func(h v1alpha1.HealthStatus) *v1alpha1.ResourceResult {
		return &v1alpha1.ResourceResult{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "web", Status: v1alpha1.ResultCodeSynced,
			SyncPhase: v1alpha1.SyncPhaseSync, SyncWave: 1, Health: &h}
	}
	progress(&v1alpha1.OperationState{Phase: v1alpha1.OperationRunning, Identity: id}, nil)
	if req.Previous == nil {
		progress(nil, hook(v1alpha1.HookPhaseRunning, ""))
		progress(nil, hook(v1alpha1.HookPhaseSucceeded, ""))
		progressing := deploy(v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusProgressing, Message: "0 of 1 replicas available"})
		progress(nil, progressing)
		progress(nil, progressing.DeepCopy())
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Identity: id,
			Message:    "not healthy within 1s: Deployment guestbook/web (Progressing: 0 of 1 replicas available)",
			SyncResult: &v1alpha1.SyncOperationResult{Revision: "0123abc", Resources: []*v1alpha1.ResourceResult{hook(v1alpha1.HookPhaseSucceeded, ""), progressing}}}
	}
	carried := hook(v1alpha1.HookPhaseSucceeded, "succeeded in an earlier attempt of this operation; not run again")
	healthy := deploy(v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusHealthy})
	progress(nil, carried)
	progress(nil, healthy)
	return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, Identity: id, Message: "successfully synced",
		SyncResult: &v1alpha1.SyncOperationResult{Revision: "0123abc", Resources: []*v1alpha1.ResourceResult{carried, healthy}}}
}

var rfc3339 = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

func TestSyncWaitPrintsHealthHooksAndRetriesAsTheyChange(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	code, out, errOut := runCLI(t, "sync", "guestbook/flaky", "--wait", "--health-timeout", "1s", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	want := `PreSync wave 0  batch/Job guestbook/migrate  Synced  hook Running
PreSync wave 0  batch/Job guestbook/migrate  Synced  hook Succeeded
wave 1  apps/Deployment guestbook/web  Synced  Progressing: 0 of 1 replicas available
not healthy within 1s: Deployment guestbook/web (Progressing: 0 of 1 replicas available); retrying (attempt 2 of 2) at TIME
retry 1 running
PreSync wave 0  batch/Job guestbook/migrate  Synced  hook Succeeded  succeeded in an earlier attempt of this operation; not run again
wave 1  apps/Deployment guestbook/web  Synced  Healthy
Succeeded as system:serviceaccount:guestbook:guestbook-deployer
`
	if got := rfc3339.ReplaceAllString(out, "TIME"); got != want {
		t.Errorf("output\n%s\nwant\n%s", got, want)
	}
	s.runner.mu.Lock()
	defer s.runner.mu.Unlock()
	if len(s.runner.reqs) != 2 || s.runner.reqs[0].Sync.HealthTimeout != "1s" || s.runner.reqs[1].Previous == nil {
		t.Errorf("requests: %d, health timeout %q; want 2, 1s, the retry with its previous attempt", len(s.runner.reqs), s.runner.reqs[0].Sync.HealthTimeout)
	}
}

func TestSyncJSONCarriesHealth(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	code, out, errOut := runCLI(t, "sync", "guestbook/flaky", "--wait", "-o", "json", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	var got struct {
		v1alpha1.OperationState
		ApplicationHealth *v1alpha1.HealthStatus `json:"applicationHealth"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Phase != v1alpha1.OperationSucceeded || got.RetryCount != 1 || got.SyncResult == nil || len(got.SyncResult.Resources) != 2 ||
		got.SyncResult.Resources[1].Health == nil || got.SyncResult.Resources[1].Health.Status != v1alpha1.HealthStatusHealthy {
		t.Errorf("final state %+v", got.OperationState)
	}
	if got.ApplicationHealth == nil || got.ApplicationHealth.Status != v1alpha1.HealthStatusHealthy || got.ApplicationHealth.LastTransitionTime == nil {
		t.Errorf("applicationHealth %+v, want Healthy with its transition time", got.ApplicationHealth)
	}
}

func TestSyncRefusesAHealthTimeoutThatIsNotADuration(t *testing.T) {
	code, _, errOut := runCLI(t, "sync", "guestbook/flaky", "--health-timeout", "ten minutes", "--server", "https://127.0.0.1:1")
	if code == 0 || !strings.Contains(errOut, `--health-timeout "ten minutes": not a Go duration`) {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestResourceLine(t *testing.T) {
	for _, tc := range []struct {
		r    v1alpha1.ResourceResult
		want string
	}{
		{v1alpha1.ResourceResult{Kind: "Deployment", Namespace: "ns", Name: "web", Status: "Synced"}, "Deployment ns/web  Synced"},
		{v1alpha1.ResourceResult{Version: "v1", Kind: "Namespace", Name: "ns", Status: "Synced", SyncPhase: "Sync", SyncWave: -1, Message: "created"},
			"wave -1  Namespace ns  Synced  created"},
		{v1alpha1.ResourceResult{Group: "apps", Kind: "Deployment", Namespace: "ns", Name: "web", Status: "SyncFailed", SyncPhase: "Sync", SyncWave: 2,
			Health: &v1alpha1.HealthStatus{Status: "Degraded", Message: "ProgressDeadlineExceeded"}}, "wave 2  apps/Deployment ns/web  SyncFailed  Degraded: ProgressDeadlineExceeded"},
		{v1alpha1.ResourceResult{Kind: "Pod", Namespace: "ns", Name: "smoke-x7k", Status: "Synced", SyncPhase: "PostSync", HookType: "PostSync", HookPhase: "Failed", Message: "exit code 1"},
			"PostSync wave 0  Pod ns/smoke-x7k  Synced  hook Failed  exit code 1"},
	} {
		if got := resourceLine(&tc.r); got != tc.want {
			t.Errorf("resourceLine = %q, want %q", got, tc.want)
		}
	}
}

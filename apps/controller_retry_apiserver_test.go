//go:build envtest

package apps_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// retryRunner fails the first failures attempts (a hook that succeeded, a
// Deployment that stayed Progressing), then succeeds with the Deployment
// Healthy; it records every request with its start time.
type retryRunner struct {
	failures int
	mu       sync.Mutex
	reqs     []syncer.Request
	at       []time.Time
	started  chan struct{}
}

func newRetryRunner(failures int) *retryRunner {
	return &retryRunner{failures: failures, started: make(chan struct{}, 100)}
}

func (r *retryRunner) Run(_ context.Context, req syncer.Request, _ syncer.Progress) *v1alpha1.OperationState {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.at = append(r.at, time.Now())
	n := len(r.reqs)
	r.mu.Unlock()
	r.started <- struct{}{}
	hook := &v1alpha1.ResourceResult{Group: "batch", Version: "v1", Kind: "Job", Namespace: "d", Name: "migrate", Status: v1alpha1.ResultCodeSynced,
		HookType: v1alpha1.SyncPhasePreSync, HookPhase: v1alpha1.HookPhaseSucceeded, SyncPhase: v1alpha1.SyncPhasePreSync}
	deploy := &v1alpha1.ResourceResult{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "d", Name: "web", Status: v1alpha1.ResultCodeSynced,
		SyncPhase: v1alpha1.SyncPhaseSync, SyncWave: 1, Health: &v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusHealthy}}
	now := metav1.Now()
	if n <= r.failures {
		deploy.Health = &v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusProgressing, Message: "0 of 1 replicas available"}
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Message: "not healthy within 1s: Deployment d/web (Progressing)", FinishedAt: &now,
			SyncResult: &v1alpha1.SyncOperationResult{Revision: "abc", Resources: []*v1alpha1.ResourceResult{hook, deploy}}}
	}
	return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, Message: "successfully synced", FinishedAt: &now,
		SyncResult: &v1alpha1.SyncOperationResult{Revision: "abc", Resources: []*v1alpha1.ResourceResult{hook, deploy}}}
}

func (r *retryRunner) requests() ([]syncer.Request, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]syncer.Request(nil), r.reqs...), append([]time.Time(nil), r.at...)
}

// createRetrying creates the Application name retried limit times, backoff
// apart, and returns its UID.
func (f *ctlFixture) createRetrying(name string, limit int64, backoff string) types.UID {
	f.t.Helper()
	u := ctlApplication(f.ns, name, false)
	retry := map[string]any{"limit": limit, "backoff": map[string]any{"duration": backoff}}
	if err := unstructuredSet(u.Object, retry, "spec", "syncPolicy", "retry"); err != nil {
		f.t.Fatal(err)
	}
	out, err := f.dyn.Namespace(f.ns).Create(f.t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return out.GetUID()
}

func unstructuredSet(obj map[string]any, value any, fields ...string) error {
	m := obj
	for _, k := range fields[:len(fields)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[fields[len(fields)-1]] = value
	return nil
}

// waitStatus waits until the persisted Application satisfies cond.
func (f *ctlFixture) waitStatus(name, what string, cond func(*v1alpha1.Application) bool) *v1alpha1.Application {
	f.t.Helper()
	var app *v1alpha1.Application
	f.waitFor(what, func() bool {
		app = f.get(name)
		return app != nil && cond(app)
	})
	return app
}

func waitingForRetry(app *v1alpha1.Application) bool {
	st := app.Status.OperationState
	return st != nil && st.Phase == v1alpha1.OperationRunning && st.NextRetryAt != nil
}

// Issue 15: in cluster mode a failed attempt is retried by the leader; the
// wait is persisted (Running, retryCount, nextRetryAt, the operation field
// kept), and the end writes status.health and status.resources.
func TestAPIServerControllerRetriesAFailedOperation(t *testing.T) {
	f := newCtlFixture(t, "retry")
	runner := newRetryRunner(1)
	f.run = runner
	a := f.leader("a", time.Second)
	f.createRetrying("app", 2, "2s")
	f.waitFor("a to see app", func() bool { app, _ := a.Application(f.ns, "app"); return app != nil })
	f.sync(a, "app", "alice")

	app := f.waitStatus("app", "the waiting retry to be persisted", waitingForRetry)
	st := app.Status.OperationState
	if app.Operation == nil || st.RetryCount != 1 || !strings.Contains(st.Message, "not healthy within 1s: Deployment d/web (Progressing); retrying (attempt 2 of 3) at ") {
		t.Errorf("while waiting: operation %v, state retryCount %d %q", app.Operation, st.RetryCount, st.Message)
	}
	if h := app.Status.Health; h.Status != v1alpha1.HealthStatusProgressing || !strings.Contains(h.Message, "Deployment d/web") {
		t.Errorf("status.health while waiting: %+v", h)
	}

	final := f.waitDone("app")
	if final.Phase != v1alpha1.OperationSucceeded || final.RetryCount != 1 || final.Interruptions != 0 {
		t.Errorf("final %s retryCount %d interruptions %d", final.Phase, final.RetryCount, final.Interruptions)
	}
	app = f.get("app")
	if h := app.Status.Health; h.Status != v1alpha1.HealthStatusHealthy || h.LastTransitionTime == nil {
		t.Errorf("status.health %+v", h)
	}
	if len(app.Status.Resources) != 1 || app.Status.Resources[0].Name != "web" || app.Status.Resources[0].SyncWave != 1 ||
		app.Status.Resources[0].Health == nil || app.Status.Resources[0].Health.Status != v1alpha1.HealthStatusHealthy {
		t.Errorf("status.resources %+v; want the Deployment (not the hook), Healthy, wave 1", app.Status.Resources)
	}
	reqs, at := runner.requests()
	if len(reqs) != 2 || reqs[1].Previous == nil || reqs[1].Previous.Phase != v1alpha1.OperationFailed {
		t.Fatalf("%d attempts; the retry's Previous: %+v", len(reqs), reqs[len(reqs)-1].Previous)
	}
	if gap := at[1].Sub(at[0]); gap < 1500*time.Millisecond {
		t.Errorf("the retry ran %s after the failure, want the 2s backoff", gap)
	}
}

// The next leader resumes a retry from the status: nextRetryAt, retryCount
// and the failed attempt's results (its Previous), not as an interruption.
func TestAPIServerControllerNextLeaderResumesAPendingRetry(t *testing.T) {
	f := newCtlFixture(t, "retry-resume")
	runner := newRetryRunner(0)
	f.run = runner
	f.createRetrying("app", 3, "5s")
	u, err := f.dyn.Namespace(f.ns).Get(t.Context(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	op := v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{}, InitiatedBy: v1alpha1.InitiatedBy{Username: "alice"}}
	opContent, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&op)
	u.Object["operation"] = opContent
	if u, err = f.dyn.Namespace(f.ns).Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What a leader that stopped during the wait leaves.
	retryAt := metav1.NewTime(time.Now().Add(3 * time.Second))
	hook := &v1alpha1.ResourceResult{Group: "batch", Version: "v1", Kind: "Job", Namespace: "d", Name: "migrate", Status: v1alpha1.ResultCodeSynced,
		HookType: v1alpha1.SyncPhasePreSync, HookPhase: v1alpha1.HookPhaseSucceeded}
	waiting := v1alpha1.ApplicationStatus{OperationState: &v1alpha1.OperationState{
		Operation: op, Phase: v1alpha1.OperationRunning, StartedAt: metav1.Now(), ObservedGeneration: u.GetGeneration(),
		Message:    "hook failed; retrying (attempt 3 of 4) at " + retryAt.UTC().Format(time.RFC3339),
		RetryCount: 2, NextRetryAt: &retryAt,
		SyncResult: &v1alpha1.SyncOperationResult{Revision: "abc", Resources: []*v1alpha1.ResourceResult{hook}},
	}}
	status, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&waiting)
	u.Object["status"] = status
	if _, err := f.dyn.Namespace(f.ns).UpdateStatus(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	f.leader("b", time.Second)
	select {
	case <-runner.started:
	case <-time.After(ctlWait):
		t.Fatal("the retry never ran")
	}
	_, at := runner.requests()
	if at[0].Before(retryAt.Time.Add(-time.Second)) { // nextRetryAt has second precision
		t.Errorf("the retry ran at %s, before nextRetryAt %s", at[0].Format(time.RFC3339Nano), retryAt.UTC().Format(time.RFC3339))
	}
	final := f.waitDone("app")
	if final.Phase != v1alpha1.OperationSucceeded || final.RetryCount != 2 || final.Interruptions != 0 {
		t.Errorf("final %s retryCount %d interruptions %d; want Succeeded, 2, 0", final.Phase, final.RetryCount, final.Interruptions)
	}
	reqs, _ := runner.requests()
	p := reqs[0].Previous
	if p == nil || p.Phase != v1alpha1.OperationFailed || p.Message != "hook failed" || p.SyncResult == nil || p.SyncResult.Resources[0].HookPhase != v1alpha1.HookPhaseSucceeded {
		t.Errorf("the resumed retry's Previous = %+v; want the failed attempt with its hook results", p)
	}
}

// Removing the operation field cancels a waiting retry at once; the status
// says so and no further attempt runs.
func TestAPIServerControllerRemovingTheOperationCancelsAWaitingRetry(t *testing.T) {
	f := newCtlFixture(t, "retry-cancel")
	runner := newRetryRunner(10)
	f.run = runner
	a := f.leader("a", time.Second)
	f.createRetrying("app", -1, "1h")
	f.waitFor("a to see app", func() bool { app, _ := a.Application(f.ns, "app"); return app != nil })
	f.sync(a, "app", "alice")
	f.waitStatus("app", "the waiting retry", waitingForRetry)

	u, err := f.dyn.Namespace(f.ns).Get(t.Context(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(u.Object, "operation")
	if _, err := f.dyn.Namespace(f.ns).Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	app := f.waitStatus("app", "the cancelled state", func(app *v1alpha1.Application) bool {
		return app.Status.OperationState != nil && app.Status.OperationState.Phase != v1alpha1.OperationRunning
	})
	if st := app.Status.OperationState; st.Phase != v1alpha1.OperationFailed ||
		!strings.HasSuffix(st.Message, "; retry cancelled: the operation was removed from the Application") || st.NextRetryAt != nil {
		t.Errorf("state %s %q (nextRetryAt %v)", st.Phase, st.Message, st.NextRetryAt)
	}
	if reqs, _ := runner.requests(); len(reqs) != 1 {
		t.Errorf("%d attempts, want 1", len(reqs))
	}
}

// An invalid spec.syncPolicy.retry (no admission checks Applications) ends
// a recorded operation in Error naming the field.
func TestAPIServerControllerEndsAnOperationOfAnInvalidRetryInError(t *testing.T) {
	f := newCtlFixture(t, "retry-invalid")
	runner := newRetryRunner(0)
	f.run = runner
	f.createRetrying("app", 2, "soon")
	u, err := f.dyn.Namespace(f.ns).Get(t.Context(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	op := v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{}, InitiatedBy: v1alpha1.InitiatedBy{Username: "alice"}}
	opContent, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&op)
	u.Object["operation"] = opContent
	if _, err := f.dyn.Namespace(f.ns).Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.leader("a", time.Second)
	st := f.waitDone("app")
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, `spec.syncPolicy.retry.backoff.duration: Invalid value: "soon"`) {
		t.Errorf("state %s %q; want Error naming the field", st.Phase, st.Message)
	}
	if reqs, _ := runner.requests(); len(reqs) != 0 {
		t.Errorf("the operation ran %d times", len(reqs))
	}
}

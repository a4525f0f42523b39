package apps_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// flakyRunner fails the first failures runs of every Application (Failed,
// with a hook that succeeded and a Deployment), then succeeds; it records
// every request.
type flakyRunner struct {
	failures int
	mu       sync.Mutex
	reqs     []syncer.Request
}

func (f *flakyRunner) Run(_ context.Context, req syncer.Request, progress syncer.Progress) *v1alpha1.OperationState {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	n := len(f.reqs)
	f.mu.Unlock()
	hook := &v1alpha1.ResourceResult{Group: "batch", Version: "v1", Kind: "Job", Namespace: "ns", Name: "migrate", Status: v1alpha1.ResultCodeSynced,
		HookType: v1alpha1.SyncPhasePreSync, HookPhase: v1alpha1.HookPhaseSucceeded, SyncPhase: v1alpha1.SyncPhasePreSync}
	deploy := &v1alpha1.ResourceResult{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "web", Status: v1alpha1.ResultCodeSynced,
		SyncPhase: v1alpha1.SyncPhaseSync, SyncWave: 1, Health: &v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusHealthy}}
	progress(nil, hook)
	if n <= f.failures {
		deploy.Health = &v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusProgressing, Message: "0 of 1 replicas available"}
		progress(nil, deploy)
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Message: fmt.Sprintf("attempt %d: not healthy within 1s: Deployment ns/web (Progressing)", n),
			SyncResult: &v1alpha1.SyncOperationResult{Revision: "abc", Resources: []*v1alpha1.ResourceResult{hook, deploy}}}
	}
	progress(nil, deploy)
	return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, Message: "successfully synced",
		SyncResult: &v1alpha1.SyncOperationResult{Revision: "abc", Resources: []*v1alpha1.ResourceResult{hook, deploy}}}
}

func (f *flakyRunner) requests() []syncer.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]syncer.Request(nil), f.reqs...)
}

// retrying is an Application whose failed syncs are retried limit times,
// waiting backoff (factor 2, at most 1s) between attempts.
func retrying(limit int64, backoff string) *v1alpha1.Application {
	a := app("ns", "app")
	a.Spec.SyncPolicy = &v1alpha1.SyncPolicy{Retry: &v1alpha1.RetryStrategy{Limit: limit, Backoff: &v1alpha1.Backoff{Duration: backoff, MaxDuration: "1s"}}}
	return a
}

// statusWrites records what a StatusWriter is given.
type statusWrites struct {
	mu     sync.Mutex
	states []*v1alpha1.OperationState
}

func (w *statusWrites) WriteOperationState(_ context.Context, _, _ string, st *v1alpha1.OperationState) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.states = append(w.states, st)
	return nil
}

func (w *statusWrites) all() []*v1alpha1.OperationState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*v1alpha1.OperationState(nil), w.states...)
}

func TestAFailedSyncIsRetriedWithThePreviousAttemptUntilItSucceeds(t *testing.T) {
	runner := &flakyRunner{failures: 2}
	writes := &statusWrites{}
	ops, rec := newOps(t, runner, apps.OperationsOptions{StatusWriter: writes})
	if _, err := ops.Start(t.Context(), retrying(3, "20ms"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	events := collect(t, ops.Watch(t.Context(), "ns", "app"))
	final := events[len(events)-1].State
	if final == nil || final.Phase != v1alpha1.OperationSucceeded || final.RetryCount != 2 || final.NextRetryAt != nil {
		t.Fatalf("the watch ended with %+v; want Succeeded after 2 retries", final)
	}

	// Each retry runs with the failed attempt's final state.
	reqs := runner.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d attempts, want 3", len(reqs))
	}
	if reqs[0].Previous != nil {
		t.Errorf("the first attempt has a previous one: %+v", reqs[0].Previous)
	}
	for i, r := range reqs[1:] {
		p := r.Previous
		if p == nil || p.Phase != v1alpha1.OperationFailed || p.RetryCount != int64(i) || !strings.HasPrefix(p.Message, fmt.Sprintf("attempt %d:", i+1)) ||
			p.SyncResult == nil || len(p.SyncResult.Resources) != 2 || p.SyncResult.Resources[0].HookPhase != v1alpha1.HookPhaseSucceeded {
			t.Errorf("attempt %d's Previous = %+v; want attempt %d's final state with its hook results", i+2, p, i+1)
		}
	}

	// The waiting states: Running, retryCount, nextRetryAt, Argo CD's
	// message; the watch went on through them. The first retry waits
	// 20ms, the second 40ms (factor 2).
	var waits []*v1alpha1.OperationState
	for _, ev := range events {
		if ev.State != nil && ev.State.NextRetryAt != nil {
			waits = append(waits, ev.State)
		}
	}
	if len(waits) != 2 {
		t.Fatalf("%d waiting states in the watch, want 2: %v", len(waits), summary(events))
	}
	for i, w := range waits {
		want := fmt.Sprintf("attempt %d: not healthy within 1s: Deployment ns/web (Progressing); retrying (attempt %d of 4) at %s",
			i+1, i+2, w.NextRetryAt.UTC().Format(time.RFC3339))
		if w.Phase != v1alpha1.OperationRunning || w.RetryCount != int64(i+1) || w.Message != want || w.FinishedAt != nil {
			t.Errorf("waiting state %d = %s retryCount %d %q; want Running, %d, %q", i+1, w.Phase, w.RetryCount, w.Message, i+1, want)
		}
	}

	// Persisted: started, waiting, started, waiting, started, final.
	var phases []string
	for _, st := range writes.all() {
		p := st.Phase
		if st.NextRetryAt != nil {
			p += "+retry"
		}
		phases = append(phases, fmt.Sprintf("%s/%d", p, st.RetryCount))
	}
	if got, want := strings.Join(phases, " "), "Running/0 Running+retry/1 Running/1 Running+retry/2 Running/2 Succeeded/2"; got != want {
		t.Errorf("status writes %s, want %s", got, want)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.audit()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // written right after the final state
	}
	if audit := rec.audit(); len(audit) != 1 || audit[0]["retryCount"] != "2" {
		t.Errorf("audit lines %v, want one with retryCount 2", audit)
	}
}

func TestRetriesEndAtTheLimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policy   *v1alpha1.SyncPolicy
		attempts int
	}{
		{"without a retry policy, one attempt", nil, 1},
		{"limit 0 retries none", &v1alpha1.SyncPolicy{Retry: &v1alpha1.RetryStrategy{}}, 1},
		{"limit 1 retries once", &v1alpha1.SyncPolicy{Retry: &v1alpha1.RetryStrategy{Limit: 1, Backoff: &v1alpha1.Backoff{Duration: "1ms"}}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runner := &flakyRunner{failures: 10}
			ops, _ := newOps(t, runner, apps.OperationsOptions{})
			a := app("ns", "app")
			a.Spec.SyncPolicy = tc.policy
			if _, err := ops.Start(t.Context(), a, project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
				t.Fatal(err)
			}
			final := waitFinished(t, ops, "ns", "app")
			want := fmt.Sprintf("attempt %d: not healthy within 1s: Deployment ns/web (Progressing)", tc.attempts)
			if final.Phase != v1alpha1.OperationFailed || final.Message != want || final.RetryCount != int64(tc.attempts-1) {
				t.Errorf("final %s %q retryCount %d; want Failed %q, %d", final.Phase, final.Message, final.RetryCount, want, tc.attempts-1)
			}
			if n := len(runner.requests()); n != tc.attempts {
				t.Errorf("%d attempts, want %d", n, tc.attempts)
			}
		})
	}
}

// waitRetrying waits until the Application's operation waits for a retry.
func waitRetrying(t *testing.T, ops *apps.Operations, ns, name string) *v1alpha1.OperationState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if st, ok := ops.Status(ns, name); ok && st.NextRetryAt != nil {
			return st
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the operation of %s/%s never waited for a retry", ns, name)
	return nil
}

func TestANewSyncReplacesAWaitingRetry(t *testing.T) {
	runner := &flakyRunner{failures: 1}
	ops, _ := newOps(t, runner, apps.OperationsOptions{})
	if _, err := ops.Start(t.Context(), retrying(-1, "1h"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	st := waitRetrying(t, ops, "ns", "app")
	if !strings.Contains(st.Message, "retrying (attempt 2, no retry limit) at ") {
		t.Errorf("waiting message %q does not say the retry is unlimited", st.Message)
	}
	old := ops.Watch(t.Context(), "ns", "app")

	if _, err := ops.Start(t.Context(), app("ns", "app"), project("ns"), v1alpha1.SyncOperation{Revision: "v2"}, alice); err != nil {
		t.Fatalf("a sync while a retry waits: %v", err)
	}
	evs := collect(t, old)
	last := evs[len(evs)-1].State
	if last == nil || last.Phase != v1alpha1.OperationFailed || !strings.HasSuffix(last.Message, "; retry cancelled: a new sync of the Application replaced the operation") {
		t.Errorf("the replaced operation's watch ended with %+v", last)
	}
	if final := waitFinished(t, ops, "ns", "app"); final.Phase != v1alpha1.OperationSucceeded || final.Operation.Sync.Revision != "v2" || final.RetryCount != 0 {
		t.Errorf("the new sync ended %s (revision %q, retryCount %d)", final.Phase, final.Operation.Sync.Revision, final.RetryCount)
	}
}

func TestShutdownCancelsAWaitingRetryWithoutPersistingIt(t *testing.T) {
	runner := &flakyRunner{failures: 1}
	writes := &statusWrites{}
	ops := apps.NewOperations(runner, apps.OperationsOptions{StatusWriter: writes})
	if _, err := ops.Start(t.Context(), retrying(3, "1h"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	waitRetrying(t, ops, "ns", "app")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	begin := time.Now()
	if err := ops.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("Shutdown waited %s for a retry due in an hour", took)
	}
	st, _ := ops.Status("ns", "app")
	if st.Phase != v1alpha1.OperationFailed || !strings.Contains(st.Message, "retry cancelled: deputy stopped running operations here") {
		t.Errorf("state after Shutdown: %s %q", st.Phase, st.Message)
	}
	// The last persisted state is the waiting one: the next leader resumes it.
	w := writes.all()
	if last := w[len(w)-1]; last.Phase != v1alpha1.OperationRunning || last.NextRetryAt == nil {
		t.Errorf("last persisted state %s (nextRetryAt %v); want the waiting state", last.Phase, last.NextRetryAt)
	}
}

func TestBeforeRetryCancelsTheRetry(t *testing.T) {
	runner := &flakyRunner{failures: 1}
	writes := &statusWrites{}
	ops, _ := newOps(t, runner, apps.OperationsOptions{StatusWriter: writes,
		BeforeRetry: func(ns, name string) (*v1alpha1.Application, *v1alpha1.AppProject, error) {
			return nil, nil, errors.New("the Application was deleted")
		}})
	if _, err := ops.Start(t.Context(), retrying(3, "1ms"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	final := waitFinished(t, ops, "ns", "app")
	if final.Phase != v1alpha1.OperationFailed || !strings.HasSuffix(final.Message, "; retry cancelled: the Application was deleted") || len(runner.requests()) != 1 {
		t.Errorf("final %s %q after %d attempts", final.Phase, final.Message, len(runner.requests()))
	}
	w := writes.all()
	if last := w[len(w)-1]; last.Phase != v1alpha1.OperationFailed || last.Message != final.Message {
		t.Errorf("last persisted state %s %q; want the cancelled final state", last.Phase, last.Message)
	}
}

func TestBeforeRetryGivesTheApplicationTheRetryRunsWith(t *testing.T) {
	runner := &flakyRunner{failures: 1}
	fixed := retrying(3, "1ms")
	fixed.Spec.Source.TargetRevision = "fixed"
	ops, _ := newOps(t, runner, apps.OperationsOptions{
		BeforeRetry: func(ns, name string) (*v1alpha1.Application, *v1alpha1.AppProject, error) {
			return fixed, project(ns), nil
		}})
	if _, err := ops.Start(t.Context(), retrying(3, "1ms"), project("ns"), v1alpha1.SyncOperation{Prune: true}, alice); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, ops, "ns", "app")
	reqs := runner.requests()
	if len(reqs) != 2 || reqs[1].Application.Spec.Source.TargetRevision != "fixed" || !reqs[1].Sync.Prune || reqs[1].InitiatedBy != alice {
		t.Errorf("the retry's request: %+v", reqs[len(reqs)-1])
	}
}

func TestStartRefusesAnInvalidRetryOrHealthTimeout(t *testing.T) {
	ops, _ := newOps(t, &flakyRunner{}, apps.OperationsOptions{})
	bad := retrying(3, "soon")
	_, err := ops.Start(t.Context(), bad, project("ns"), v1alpha1.SyncOperation{}, alice)
	if !errors.Is(err, apps.ErrInvalidSync) || !strings.Contains(err.Error(), "spec.syncPolicy.retry.backoff.duration") {
		t.Errorf("invalid backoff: %v", err)
	}
	_, err = ops.Start(t.Context(), app("ns", "app"), project("ns"), v1alpha1.SyncOperation{HealthTimeout: "-1m"}, alice)
	if !errors.Is(err, apps.ErrInvalidSync) || !strings.Contains(err.Error(), "operation.sync.healthTimeout") {
		t.Errorf("invalid healthTimeout: %v", err)
	}
}

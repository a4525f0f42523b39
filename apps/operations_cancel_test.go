package apps_test

import (
	"strings"
	"testing"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// Issue 16: Cancel ends a running operation (the Application was deleted),
// its final state saying why; an Application with no running operation has
// nothing to cancel.
func TestCancelEndsARunningOperationAndSaysWhy(t *testing.T) {
	runner := newFakeRunner()
	runner.script("ns", "a", script{release: make(chan struct{})}) // never released
	ops, _ := newOps(t, runner, apps.OperationsOptions{})
	if ops.Cancel("ns", "a", "the Application was deleted") {
		t.Error("Cancel with no operation reported one")
	}
	if _, err := ops.Start(t.Context(), app("ns", "a"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	runner.waitStarted(t, "ns/a")
	if !ops.Cancel("ns", "a", "the Application was deleted") {
		t.Fatal("Cancel of a running operation reported none")
	}
	st := waitFinished(t, ops, "ns", "a")
	if st.Phase != v1alpha1.OperationError || !strings.HasPrefix(st.Message, "operation cancelled: the Application was deleted; ") {
		t.Errorf("state %s: %s", st.Phase, st.Message)
	}
	if ops.Running("ns", "a") || ops.Cancel("ns", "a", "again") {
		t.Error("the cancelled operation still counts as running")
	}
	// The Application is free again.
	runner.script("ns", "a", script{})
	if _, err := ops.Start(t.Context(), app("ns", "a"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	if st := waitFinished(t, ops, "ns", "a"); st.Phase != v1alpha1.OperationSucceeded {
		t.Errorf("the next operation: %s: %s", st.Phase, st.Message)
	}
}

// A waiting retry is cancelled too, with the reason.
func TestCancelEndsAWaitingRetry(t *testing.T) {
	runner := newFakeRunner()
	runner.script("ns", "a", script{final: func(_ syncer.Request) *v1alpha1.OperationState {
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Message: "boom"}
	}})
	a := app("ns", "a")
	a.Spec.SyncPolicy = &v1alpha1.SyncPolicy{Retry: &v1alpha1.RetryStrategy{Limit: 3, Backoff: &v1alpha1.Backoff{Duration: "1h"}}}
	ops, _ := newOps(t, runner, apps.OperationsOptions{})
	if _, err := ops.Start(t.Context(), a, project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	runner.waitStarted(t, "ns/a")
	for {
		if st, _ := ops.Status("ns", "a"); st != nil && st.NextRetryAt != nil {
			break
		}
	}
	if !ops.Cancel("ns", "a", "the Application is being deleted") {
		t.Fatal("Cancel of a waiting retry reported none")
	}
	st := waitFinished(t, ops, "ns", "a")
	if st.Phase != v1alpha1.OperationFailed || !strings.Contains(st.Message, "retry cancelled: the Application is being deleted") {
		t.Errorf("state %s: %s", st.Phase, st.Message)
	}
}

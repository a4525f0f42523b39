//go:build envtest

package apps_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
)

// Issue 11 item 5: an operation that crashes deputy is run again by every
// new leader. Each leader records the attempt (status.operationState.
// interruptions) before it runs the operation; one that finds it started
// MaxOperationAttempts times without ending ends it in Error instead.
func TestAPIServerControllerInterruptedOperationIsRunAtMostThreeTimes(t *testing.T) {
	f := newCtlFixture(t, "attempts")
	f.create("app")

	// What two crashed leaders leave: the operation recorded, its Running
	// state of that generation, started twice (interruptions 1).
	u, err := f.dyn.Namespace(f.ns).Get(t.Context(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	op := v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{}, InitiatedBy: v1alpha1.InitiatedBy{Username: "alice"}}
	opContent, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&op)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["operation"] = opContent
	if u, err = f.dyn.Namespace(f.ns).Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := v1alpha1.ApplicationStatus{OperationState: &v1alpha1.OperationState{
		Operation: op, Phase: v1alpha1.OperationRunning, StartedAt: metav1.Now(), ObservedGeneration: u.GetGeneration(), Interruptions: 1,
	}}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&running)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = status
	if _, err := f.dyn.Namespace(f.ns).UpdateStatus(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The third leader records the third attempt before running it...
	a := f.leader("a", 200*time.Millisecond)
	third := f.runner.next(t, "the third attempt")
	if st := f.get("app").Status.OperationState; st == nil || st.Interruptions != 2 || st.Phase != v1alpha1.OperationRunning {
		t.Fatalf("while the third attempt runs, status.operationState = %+v; want Running with interruptions 2", st)
	}
	// ...and stops before it ends (as if it crashed).
	a.stop()
	<-a.done
	<-third.ended

	// The fourth leader does not run it: it ends it in Error.
	b := f.leader("b", time.Second)
	st := f.waitDone("app")
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "interrupted 3 times") || !strings.Contains(st.Message, "sync again") {
		t.Errorf("persisted state = %s %q; want Error saying it was interrupted 3 times", st.Phase, st.Message)
	}
	if st.Interruptions != 2 {
		t.Errorf("interruptions = %d, want 2", st.Interruptions)
	}
	select {
	case run := <-f.runner.started:
		t.Errorf("the operation ran a fourth time: %s", run)
	case <-time.After(2 * time.Second):
	}

	// A new sync starts from zero.
	f.sync(b, "app", "bob")
	next := f.runner.next(t, "the new sync")
	if st := f.get("app").Status.OperationState; st == nil || st.Interruptions != 0 {
		t.Errorf("a new sync's state = %+v, want interruptions 0", st)
	}
	next.succeed()
	if st := f.waitDone("app"); st.Phase != v1alpha1.OperationSucceeded {
		t.Errorf("the new sync ended %s %q", st.Phase, st.Message)
	}
}

// A first attempt is recorded with interruptions 0 and ends normally.
func TestAPIServerControllerFirstAttemptHasNoRetries(t *testing.T) {
	f := newCtlFixture(t, "first-attempt")
	a := f.leader("a", time.Second)
	f.create("app", a)
	f.sync(a, "app", "alice")
	run := f.runner.next(t, "the sync")
	run.succeed()
	if st := f.waitDone("app"); st.Phase != v1alpha1.OperationSucceeded || st.Interruptions != 0 {
		t.Errorf("persisted state = %s, interruptions %d; want Succeeded, 0", st.Phase, st.Interruptions)
	}
	if apps.MaxOperationAttempts != 3 {
		t.Errorf("MaxOperationAttempts = %d, want 3", apps.MaxOperationAttempts)
	}
}

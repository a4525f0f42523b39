//go:build envtest

package apps_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// holdFinalizer is another controller's finalizer: it keeps a deleted
// Application (with its DeletionTimestamp) until the test removes it.
const holdFinalizer = "example.com/hold"

// fakeDeleter is the replicas' ResourceDeleter: it fails with failure while
// that is set, else succeeds; it records its calls.
type fakeDeleter struct {
	mu      sync.Mutex
	failure string
	calls   []syncer.DeleteOptions
}

func (d *fakeDeleter) DeleteResources(_ context.Context, app *v1alpha1.Application, _ *v1alpha1.AppProject, opts syncer.DeleteOptions) *v1alpha1.OperationState {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, opts)
	now := metav1.Now()
	if d.failure != "" {
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationError, Message: d.failure, FinishedAt: &now}
	}
	return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, Message: "deleted 1 resources, as system:serviceaccount:x:y", FinishedAt: &now}
}

func (d *fakeDeleter) set(failure string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failure = failure
}

func (d *fakeDeleter) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.calls)
}

// createWithFinalizers creates the Application name with finalizers.
func (f *ctlFixture) createWithFinalizers(name string, finalizers ...string) types.UID {
	f.t.Helper()
	u := ctlApplication(f.ns, name, false)
	u.SetFinalizers(finalizers)
	out, err := f.dyn.Namespace(f.ns).Create(f.t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return out.GetUID()
}

func (f *ctlFixture) patchJSON(name string, ops []map[string]any) {
	f.t.Helper()
	patch, _ := json.Marshal(ops)
	if _, err := f.dyn.Namespace(f.ns).Patch(f.t.Context(), name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		f.t.Fatalf("patch %s: %v", patch, err)
	}
}

func deletionCondition(app *v1alpha1.Application) *v1alpha1.ApplicationCondition {
	for i := range app.Status.Conditions {
		if app.Status.Conditions[i].Type == v1alpha1.ApplicationConditionDeletionError {
			return &app.Status.Conditions[i]
		}
	}
	return nil
}

func TestAPIServerControllerDeletingAnApplicationCancelsItsRunningOperation(t *testing.T) {
	f := newCtlFixture(t, "ctl-delete-cancel")
	a := f.leader("a", 10*time.Second)
	// Deleted outright: the run is cancelled, nothing is written.
	f.create("gone", a)
	f.sync(a, "gone", "alice")
	run := f.runner.next(t, "the sync of gone")
	f.delete("gone", a)
	select {
	case <-run.ended:
	case <-time.After(ctlWait):
		t.Fatal("the operation of a deleted Application was not cancelled")
	}
	if !run.cancelled {
		t.Fatal("the run ended, but not by cancellation")
	}

	// Being deleted (another finalizer holds it): the run is cancelled, its
	// final state says why, written once; nothing is started again.
	f.createWithFinalizers("held", holdFinalizer)
	f.waitFor("a to see held", func() bool { app, _ := a.Application(f.ns, "held"); return app != nil })
	f.sync(a, "held", "alice")
	run = f.runner.next(t, "the sync of held")
	if err := f.dyn.Namespace(f.ns).Delete(t.Context(), "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	app := f.waitStatus("held", "the cancelled state", func(app *v1alpha1.Application) bool {
		st := app.Status.OperationState
		return app.Operation == nil && st != nil && st.Phase != v1alpha1.OperationRunning
	})
	if !run.cancelled || !strings.HasPrefix(app.Status.OperationState.Message, "operation cancelled: the Application is being deleted") {
		t.Fatalf("cancelled=%v state=%+v", run.cancelled, app.Status.OperationState)
	}
	rv := app.ResourceVersion
	time.Sleep(2 * time.Second)
	if again := f.get("held"); again.ResourceVersion != rv {
		t.Errorf("the Application being deleted was written again: resourceVersion %s -> %s (status %+v)", rv, again.ResourceVersion, again.Status)
	}
	select {
	case r := <-f.runner.started:
		t.Errorf("an operation started on an Application being deleted: %s", r)
	default:
	}
	f.patchJSON("held", []map[string]any{{"op": "remove", "path": "/metadata/finalizers"}})
}

func TestAPIServerControllerDeletesTheResourcesThenRemovesOnlyItsFinalizer(t *testing.T) {
	f := newCtlFixture(t, "ctl-delete-finalizer")
	d := &fakeDeleter{failure: `the ServiceAccount may not: delete configmaps in namespace "d"`}
	f.deleter = d
	a := f.leader("a", 10*time.Second)
	f.createWithFinalizers("app", holdFinalizer, v1alpha1.BackgroundResourcesFinalizer)
	f.waitFor("a to see app", func() bool { app, _ := a.Application(f.ns, "app"); return app != nil })
	if err := f.dyn.Namespace(f.ns).Delete(t.Context(), "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	app := f.waitStatus("app", "the DeletionError condition", func(app *v1alpha1.Application) bool { return deletionCondition(app) != nil })
	msg := deletionCondition(app).Message
	orphan := apps.OrphanCommand(app, v1alpha1.BackgroundResourcesFinalizer)
	if !strings.Contains(msg, "delete configmaps") || !strings.Contains(msg, orphan) || !strings.Contains(orphan, `"path":"/metadata/finalizers/1"`) {
		t.Fatalf("condition message: %s", msg)
	}
	if len(app.Finalizers) != 2 {
		t.Fatalf("finalizers after a failed deletion: %v", app.Finalizers)
	}
	// Not a hot loop: the same failure is tried again after a backoff, and
	// the condition is not written again.
	time.Sleep(2 * time.Second)
	if n := d.count(); n > 2 {
		t.Errorf("%d deletions in 2 s after a failure", n)
	}
	if again := f.get("app"); again.ResourceVersion != app.ResourceVersion {
		t.Errorf("the same failure was written again")
	}

	d.set("")
	app = f.waitStatus("app", "the finalizer removed", func(app *v1alpha1.Application) bool { return len(app.Finalizers) == 1 })
	if app.Finalizers[0] != holdFinalizer || deletionCondition(app) != nil {
		t.Fatalf("finalizers %v, conditions %+v", app.Finalizers, app.Status.Conditions)
	}
	d.mu.Lock()
	last := d.calls[len(d.calls)-1]
	d.mu.Unlock()
	if last.PropagationPolicy != metav1.DeletePropagationBackground {
		t.Errorf("propagation %q, want Background", last.PropagationPolicy)
	}
	f.patchJSON("app", []map[string]any{{"op": "remove", "path": "/metadata/finalizers"}})
	f.waitFor("app to be gone", func() bool { return f.get("app") == nil })
}

func TestAPIServerControllerOrphanCommandReleasesTheApplication(t *testing.T) {
	f := newCtlFixture(t, "ctl-delete-orphan")
	d := &fakeDeleter{failure: "no matching service account found for destination server https://kubernetes.default.svc and namespace d"}
	f.deleter = d
	a := f.leader("a", 10*time.Second)
	f.createWithFinalizers("app", v1alpha1.ArgoCDResourcesFinalizer)
	f.waitFor("a to see app", func() bool { app, _ := a.Application(f.ns, "app"); return app != nil })
	if err := f.dyn.Namespace(f.ns).Delete(t.Context(), "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	app := f.waitStatus("app", "the DeletionError condition", func(app *v1alpha1.Application) bool { return deletionCondition(app) != nil })
	if msg := deletionCondition(app).Message; !strings.Contains(msg, "no matching service account found") {
		t.Fatalf("condition: %s", msg)
	}
	d.mu.Lock()
	first := d.calls[0]
	d.mu.Unlock()
	if first.PropagationPolicy != metav1.DeletePropagationForeground {
		t.Errorf("propagation %q, want Foreground", first.PropagationPolicy)
	}
	// The orphan step as the condition prints it (its JSON patch).
	cmd := apps.OrphanCommand(app, v1alpha1.ArgoCDResourcesFinalizer)
	_, patch, _ := strings.Cut(cmd, "-p '")
	patch = strings.TrimSuffix(patch, "'")
	var ops []map[string]any
	if err := json.Unmarshal([]byte(patch), &ops); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	f.patchJSON("app", ops)
	f.waitFor("app to be gone", func() bool { return f.get("app") == nil })
}

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/test/framework"
)

// Issue 16, deletion (attack 28), on a cluster-mode replica: tenant A moves
// its synced Application (with a resources finalizer) to tenant B's
// AppProject and destination, then deletes it: the deletion, now as B's
// ServiceAccount, deletes nothing of B's (B's objects carry B's tracking
// value) and nothing in A's old namespace (B's project does not permit it).
// And a Foreground finalizer where no garbage collector runs: the
// deletion fails after the health timeout with a DeletionError naming the
// way out, keeping the finalizer; deputy keeps serving.
func TestAttack28DeletionAfterAProjectSwitch(t *testing.T) {
	env := setupWaves(t)
	env.start(t)
	const nsA, nsB = "attack28-a", "attack28-b"
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	deletionTenant(t, nsA, nsA, all...)
	saB := deletionTenant(t, nsB, nsB, all...)
	syncedDeletableApp(t, "a28-a", nsA, nsA, v1alpha1.BackgroundResourcesFinalizer, "a28-a-own")
	syncedDeletableApp(t, "a28-b", nsB, nsB, v1alpha1.BackgroundResourcesFinalizer, "a28-b-own")

	patch := fmt.Sprintf(`{"spec":{"project":%q,"destination":{"namespace":%q}}}`, nsB, nsB)
	if _, err := applicationsClient().Namespace(wavesAppNS).Patch(t.Context(), "a28-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	started := time.Now()
	if err := applicationsClient().Namespace(wavesAppNS).Delete(t.Context(), "a28-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, "the Application is gone or reports a DeletionError", 2*time.Minute, func() error {
		u, err := applicationsClient().Namespace(wavesAppNS).Get(t.Context(), "a28-a", metav1.GetOptions{})
		if err != nil {
			return applicationGone(t, "a28-a")()
		}
		app := applicationOf(t, u)
		for _, c := range app.Status.Conditions {
			if c.Type == v1alpha1.ApplicationConditionDeletionError {
				t.Logf("DeletionError: %s", c.Message)
				return nil
			}
		}
		return fmt.Errorf("still there: conditions %+v", app.Status.Conditions)
	})
	if err := configMapExists(t, nsB, "a28-b-own"); err != nil {
		t.Errorf("tenant B's own object: %v", err)
	}
	for _, ev := range auditedWrites(t, started, 0, func(ev framework.AuditEvent) bool {
		return ev.Verb == "delete" && ev.ObjectRef != nil && (ev.ObjectRef.Namespace == nsB ||
			ev.ObjectRef.Namespace == nsA && ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username == saB)
	}) {
		t.Errorf("a delete after the switch: %s %s/%s by %s impersonating %+v", ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name,
			ev.User.Username, ev.ImpersonatedUser)
	}
}

func TestAttack28ForegroundWithoutGarbageCollector(t *testing.T) {
	env := setupWaves(t)
	replica := env.start(t)
	const ns = "attack28-fg"
	deletionTenant(t, ns, ns, "get", "list", "watch", "create", "update", "patch", "delete")
	syncedDeletableApp(t, "a28-fg", ns, ns, v1alpha1.ResourcesFinalizer, "a28-fg-own")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin(t).CoreV1().ConfigMaps(ns).Patch(ctx, "a28-fg-own", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if _, err := applicationsClient().Namespace(wavesAppNS).Patch(t.Context(), "a28-fg", types.MergePatchType,
		[]byte(`{"spec":{"syncPolicy":{"healthTimeout":"5s"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := applicationsClient().Namespace(wavesAppNS).Delete(t.Context(), "a28-fg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	eventuallyWithin(t, "the DeletionError condition", 2*time.Minute, func() error {
		app := getApplication(t, wavesAppNS, "a28-fg")
		for _, c := range app.Status.Conditions {
			if c.Type == v1alpha1.ApplicationConditionDeletionError {
				msg = c.Message
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", app.Status.Conditions)
	})
	t.Logf("DeletionError: %s", msg)
	app := getApplication(t, wavesAppNS, "a28-fg")
	if !slices.Contains(app.Finalizers, v1alpha1.ResourcesFinalizer) {
		t.Errorf("finalizers %v", app.Finalizers)
	}
	if !strings.Contains(strings.ToLower(msg), "background") && !strings.Contains(msg, "garbage") {
		t.Errorf("the DeletionError does not point to the way out (the /background finalizer, a garbage collector): %s", msg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := replica.WaitReady(ctx); err != nil {
		t.Errorf("the replica: %v", err)
	}
}

package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/test/framework"
)

// Issue 16, cascading deletion across tenants: tenant A's Application
// (finalizer, destination attack24-a) records in its status a ConfigMap in
// tenant B's namespace (a forged status: whoever may write the status
// subresource), and B's ConfigMap carries A's tracking value (forged
// annotation). Deleting A's Application deletes A's own objects and
// nothing in B's namespace: deletion looks only in namespaces A's AppProject
// permits, as A's ServiceAccount, which may not touch B's namespace anyway.
func TestAttack24DeletionNeverLeavesTheProjectsDestinations(t *testing.T) {
	env := setupWaves(t)
	env.start(t)
	const destA, destB, name = "attack24-a", "attack24-b", "a24-tenant-a"
	deletionTenant(t, "attack24-a", destA, "get", "list", "watch", "create", "update", "patch", "delete")
	deletionTenant(t, "attack24-b", destB, "get", "list", "watch", "create", "update", "patch", "delete")
	app := syncedDeletableApp(t, name, "attack24-a", destA, v1alpha1.BackgroundResourcesFinalizer, "a24-own")
	tracking := map[string]string{syncer.TrackingAnnotation: app.Namespace + "/" + app.Name}
	lookAlike(t, destB, "a24-victim", tracking)

	// The forged status: A's last operation "recorded" B's ConfigMap.
	u, err := applicationsClient().Namespace(wavesAppNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := app.Status.DeepCopy()
	st.OperationState.SyncResult.Resources = append(st.OperationState.SyncResult.Resources,
		&v1alpha1.ResourceResult{Version: "v1", Kind: "ConfigMap", Namespace: destB, Name: "a24-victim", Status: v1alpha1.ResultCodeSynced})
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = content
	if _, err := applicationsClient().Namespace(wavesAppNS).UpdateStatus(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	started := time.Now()
	if err := applicationsClient().Namespace(wavesAppNS).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, "the Application is gone", 2*time.Minute, applicationGone(t, name))
	if err := absent("ConfigMap "+destA+"/a24-own", func() error { return configMapExists(t, destA, "a24-own") }); err != nil {
		t.Errorf("tenant A's own object: %v", err)
	}
	if err := configMapExists(t, destB, "a24-victim"); err != nil {
		t.Errorf("tenant B's ConfigMap with A's forged tracking value: %v", err)
	}
	for _, ev := range auditedWrites(t, started, 0, func(ev framework.AuditEvent) bool {
		return ev.Verb == "delete" && ev.ObjectRef != nil && ev.ObjectRef.Namespace == destB
	}) {
		t.Errorf("a delete in tenant B's namespace: %s %s by %s impersonating %+v", ev.ObjectRef.Resource, ev.ObjectRef.Name, ev.User.Username, ev.ImpersonatedUser)
	}
}

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/test/framework"
)

// Issue 16 (points 3 and 4): cascading deletion of an Application's
// resources by the Application controller (cluster mode, a replica of
// deputy as deputy-system/deputy, setupWaves' environment), as the
// ServiceAccount its AppProject derives. The tests use the background
// finalizer: this cluster runs no kube-controller-manager, so no garbage
// collector ever removes the foregroundDeletion finalizer a Foreground
// delete puts on an object (docs/configuration.md "Deleting an
// Application").

// deputyReplicaUser is the replicas' own identity (newReplicaEnv).
const deputyReplicaUser = "system:serviceaccount:" + deputyNamespace + ":deputy"

// deletionTenant prepares a destination namespace dest with the
// ServiceAccount dest/deployer allowed verbs on ConfigMaps there, and the
// deputy.dev AppProject project (Applications in wavesAppNS, destination
// dest, deploying as deployer); it waits until the replicas' gate lets
// deputy act as it, and returns its username.
func deletionTenant(t *testing.T, project, dest string, verbs ...string) string {
	t.Helper()
	ensureNamespace(t, dest)
	serviceAccountToken(t, dest, "deployer")
	role(t, dest, "deployer", dest, "deployer", rule("", []string{"configmaps"}, verbs...))
	createDeputyAppProject(t, project, wavesAppNS, dest, "deployer")
	saUser := "system:serviceaccount:" + dest + ":deployer"
	c := cp.TokenConfig(serviceAccountToken(t, deputyNamespace, "deputy"))
	eventually(t, "the gate lets deputy-system/deputy act as "+saUser, func() error {
		_, err := impersonating(c, saUser).CoreV1().ConfigMaps(dest).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err
	})
	return saUser
}

// syncedDeletableApp creates the Application name of project with the
// finalizer, syncing the ConfigMaps names from a new repository into dest,
// and waits until that sync succeeded. The test's end releases it (its
// finalizers removed) if it is still there.
func syncedDeletableApp(t *testing.T, name, project, dest, finalizer string, names ...string) *v1alpha1.Application {
	t.Helper()
	repo := newGitRepo(t)
	for _, n := range names {
		repo.write(name+"/"+n+".yaml", configMap(n, "app: "+name))
	}
	repo.commit("the ConfigMaps of " + name)
	app := wavesApplication(name, repo.dir, name)
	app.Spec.Project = project
	app.Spec.Destination.Namespace = dest
	app.Finalizers = []string{finalizer}
	app.Operation = &v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{}, InitiatedBy: v1alpha1.InitiatedBy{Username: "e2e"}}
	createApplication(t, app)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = applicationsClient().Namespace(app.Namespace).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = applicationsClient().Namespace(app.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
	st := waitOperationDone(t, wavesAppNS, name, 2*time.Minute)
	if st.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("the sync of %s: %s", name, describeAll(st))
	}
	return getApplication(t, wavesAppNS, name)
}

// lookAlike creates ConfigMap ns/name as the admin, with annotations.
func lookAlike(t *testing.T, ns, name string, annotations map[string]string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations}, Data: map[string]string{"k": "v"}}
	if _, err := admin(t).CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func configMapExists(t *testing.T, ns, name string) error {
	t.Helper()
	_, err := admin(t).CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	return err
}

// applicationGone is nil once the Application no longer exists.
func applicationGone(t *testing.T, name string) func() error {
	return func() error {
		return absent("Application "+wavesAppNS+"/"+name, func() error {
			_, err := applicationsClient().Namespace(wavesAppNS).Get(t.Context(), name, metav1.GetOptions{})
			return err
		})
	}
}

func TestDeleteApplicationDeletesItsResourcesAsTheServiceAccount(t *testing.T) {
	env := setupWaves(t)
	env.start(t)
	const dest, other, name = "delete-dest", "delete-other", "cascade"
	saUser := deletionTenant(t, "delete", dest, "get", "list", "watch", "create", "update", "patch", "delete")
	app := syncedDeletableApp(t, name, "delete", dest, v1alpha1.BackgroundResourcesFinalizer, "cascade-one", "cascade-two")
	tracking := map[string]string{syncer.TrackingAnnotation: app.Namespace + "/" + app.Name}
	// Look-alikes: the same name in another namespace, even with this
	// Application's tracking value; one without the annotation; one of
	// another Application.
	ensureNamespace(t, other)
	lookAlike(t, other, "cascade-one", tracking)
	lookAlike(t, dest, "cascade-untracked", nil)
	lookAlike(t, dest, "cascade-other-app", map[string]string{syncer.TrackingAnnotation: wavesAppNS + "/someone-else"})

	started := time.Now()
	if err := applicationsClient().Namespace(wavesAppNS).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, "the Application is gone", 2*time.Minute, applicationGone(t, name))
	for _, n := range []string{"cascade-one", "cascade-two"} {
		if err := absent("ConfigMap "+dest+"/"+n, func() error { return configMapExists(t, dest, n) }); err != nil {
			t.Errorf("tracked object not deleted: %v", err)
		}
	}
	for _, o := range [][2]string{{other, "cascade-one"}, {dest, "cascade-untracked"}, {dest, "cascade-other-app"}} {
		if err := configMapExists(t, o[0], o[1]); err != nil {
			t.Errorf("look-alike %s/%s: %v", o[0], o[1], err)
		}
	}
	for _, n := range []string{"cascade-one", "cascade-two"} {
		evs := auditedWrites(t, started, 1, isWrite("configmaps", dest, n, "delete"))
		if len(evs) == 0 {
			t.Errorf("no audited delete of %s/%s", dest, n)
		}
		for _, ev := range evs {
			if ev.User.Username != deputyReplicaUser || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != saUser {
				t.Errorf("delete of %s by %s impersonating %+v, want %s impersonating %s", n, ev.User.Username, ev.ImpersonatedUser, deputyReplicaUser, saUser)
			}
		}
	}
	// Nothing else was deleted in these namespaces since.
	for _, ev := range auditedWrites(t, started, 0, func(ev framework.AuditEvent) bool {
		return ev.Verb == "delete" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "configmaps" &&
			(ev.ObjectRef.Namespace == other || ev.ObjectRef.Name == "cascade-untracked" || ev.ObjectRef.Name == "cascade-other-app")
	}) {
		t.Errorf("a look-alike was deleted: %+v", ev.ObjectRef)
	}
}

func TestDeleteApplicationWithoutDeletePermissionKeepsTheFinalizer(t *testing.T) {
	env := setupWaves(t)
	env.start(t)
	const dest, name = "delete-denied", "undeletable"
	deletionTenant(t, "delete-denied", dest, "get", "list", "watch", "create", "update", "patch")
	syncedDeletableApp(t, name, "delete-denied", dest, v1alpha1.BackgroundResourcesFinalizer, "undeletable-one")
	if err := applicationsClient().Namespace(wavesAppNS).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var cond *v1alpha1.ApplicationCondition
	eventuallyWithin(t, "the DeletionError condition", 2*time.Minute, func() error {
		app := getApplication(t, wavesAppNS, name)
		for i := range app.Status.Conditions {
			if app.Status.Conditions[i].Type == v1alpha1.ApplicationConditionDeletionError {
				cond = &app.Status.Conditions[i]
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", app.Status.Conditions)
	})
	t.Logf("DeletionError: %s", cond.Message)
	app := getApplication(t, wavesAppNS, name)
	if !slices.Contains(app.Finalizers, v1alpha1.BackgroundResourcesFinalizer) || app.DeletionTimestamp == nil {
		t.Errorf("finalizers %v, deletionTimestamp %v", app.Finalizers, app.DeletionTimestamp)
	}
	if !strings.Contains(cond.Message, "delete") || !strings.Contains(cond.Message, "configmaps") {
		t.Errorf("the condition does not name the missing permission (delete configmaps): %s", cond.Message)
	}
	if err := configMapExists(t, dest, "undeletable-one"); err != nil {
		t.Errorf("the resource: %v", err)
	}
	// The documented orphan step, as the condition prints it.
	_, command, ok := strings.Cut(cond.Message, "removing the finalizer: ")
	_, patch, ok2 := strings.Cut(command, "-p '")
	if !ok || !ok2 || !strings.HasPrefix(command, "kubectl patch applications.deputy.dev "+name+" -n "+wavesAppNS+" --type json") {
		t.Fatalf("no kubectl command in the condition: %s", cond.Message)
	}
	patch = strings.TrimSuffix(patch, "'")
	if out, stderr, err := cp.Kubectl(t.Context(), nil, "patch", "applications.deputy.dev", name, "-n", wavesAppNS, "--type", "json", "-p", patch); err != nil {
		t.Fatalf("kubectl patch: %v\n%s%s", err, out, stderr)
	}
	eventuallyWithin(t, "the Application is gone", time.Minute, applicationGone(t, name))
	if err := configMapExists(t, dest, "undeletable-one"); err != nil {
		t.Errorf("the orphaned resource: %v", err)
	}
}

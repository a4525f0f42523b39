package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// Issue 15, the preflight and hooks: everything an operation will do is
// asked before anything is written. A named hook whose previous object
// exists is deleted (BeforeHookCreation) and then created anew: "create" is
// needed even though the object exists. A ServiceAccount that may delete
// but not create ConfigMaps must fail the preflight, naming create, with
// the previous hook object untouched (before the fix the preflight asked
// only patch, deputy deleted the previous object and then failed to create
// the new one).
func TestAttack23HookPreflightBeforeDelete(t *testing.T) {
	const ns = "attack23-hooks"
	project, _ := engineTenant(t, ns,
		rule("", []string{"configmaps"}, "get", "list", "watch", "update", "patch", "delete"))
	engine, _ := newSyncEngine(t, enforced)
	cs := admin(t)
	const app, name = "a23-nocreate", "a23-prev"
	// The hook's object from an earlier sync of this Application.
	_ = cs.CoreV1().ConfigMaps(ns).Delete(t.Context(), name, metav1.DeleteOptions{})
	eventually(t, "no ConfigMap "+name+" before the test", func() error {
		return absent(name, func() error {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
			return err
		})
	})
	prev, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{syncer.TrackingAnnotation: "argocd/" + app}},
		Data:       map[string]string{"run": "earlier"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	repo := newGitRepo(t)
	repo.write("app/hook.yaml", annotatedConfigMap(name, `argocd.argoproj.io/hook: PreSync`))
	repo.commit("a hook re-created each sync")
	st := startSync(t, engine, syncer.Request{Application: application(app, ns, repo.dir, "app", ns), Project: project}).wait(t, time.Minute)
	t.Log(describeAll(st))
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "create") || !strings.Contains(st.Message, "BeforeHookCreation") {
		t.Errorf("want the preflight to fail naming create for the re-created hook: %s", describeAll(st))
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || cm.UID != prev.UID {
		t.Errorf("the hook's previous object was deleted before the operation knew it could re-create it: %v", err)
	}
}

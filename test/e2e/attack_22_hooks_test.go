package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// Issue 15, hostile hooks: a hook's delete policies (BeforeHookCreation,
// Argo CD's default, deletes the hook's previous object before creating it;
// HookSucceeded / HookFailed delete it after it ran) are a way to delete
// objects by name, and the names are the tenant's. A hook named like an
// object this Application does not track (nobody's, another Application's,
// one a controller owns) must not delete it: prune's rule holds for hooks
// too, deputy deletes only what carries this Application's tracking
// annotation. Hooks of this Application are still deleted and re-created
// (the positive control). generateName hooks are placed like any object: a
// namespace or a cluster-scoped kind the project does not permit is refused
// before anything is written.
func TestAttack22HookDeletesForeignObjects(t *testing.T) {
	const ns = "attack22-hooks"
	project, _ := engineTenant(t, ns)
	engine, _ := newSyncEngine(t, enforced)
	cs := admin(t)

	// Objects this tenant's Applications do not track, created by someone
	// else in the tenant's own namespace.
	precreate := func(name string, ann map[string]string, owners []metav1.OwnerReference) types.UID {
		t.Helper()
		_ = cs.CoreV1().ConfigMaps(ns).Delete(t.Context(), name, metav1.DeleteOptions{})
		eventually(t, "ConfigMap "+name+" is gone before the test", func() error {
			return absent(name, func() error {
				_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
				return err
			})
		})
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann, OwnerReferences: owners},
			Data:       map[string]string{"owner": "someone else"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.UID
	}
	controller := true
	untouched := map[string]types.UID{
		"a22-bystander":    precreate("a22-bystander", nil, nil),
		"a22-bystander-hs": precreate("a22-bystander-hs", nil, nil),
		"a22-owned": precreate("a22-owned", nil, []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap",
			Name: "a22-owner", UID: "00000000-0000-0000-0000-0000000000a2", Controller: &controller}}),
		"a22-victim": precreate("a22-victim", map[string]string{syncer.TrackingAnnotation: "argocd/a22-victim-app"}, nil),
	}

	repo := newGitRepo(t)
	repo.write("bhc/cm.yaml", annotatedConfigMap("a22-bystander", `argocd.argoproj.io/hook: PreSync`))
	repo.write("succeeded/cm.yaml", annotatedConfigMap("a22-bystander-hs",
		`argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded`))
	repo.write("helm/cm.yaml", annotatedConfigMap("a22-owned",
		`helm.sh/hook: pre-install, helm.sh/hook-delete-policy: "before-hook-creation,hook-succeeded"`))
	repo.write("other/cm.yaml", annotatedConfigMap("a22-victim",
		`argocd.argoproj.io/hook: Sync, argocd.argoproj.io/hook-delete-policy: "BeforeHookCreation,HookSucceeded"`))
	// The positive control: this Application's own hooks.
	repo.write("own/cm.yaml", annotatedConfigMap("a22-own", `argocd.argoproj.io/hook: PreSync`))
	repo.write("own/done.yaml", annotatedConfigMap("a22-own-done",
		`argocd.argoproj.io/hook: PostSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded`))
	repo.write("own/gen.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: a22-gen-\n"+
		"  annotations: {argocd.argoproj.io/hook: PostSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded}\ndata: {k: v}\n")
	// generateName hooks outside what the project permits.
	repo.write("gen-ns/gen.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: a22-gen-\n  namespace: default\n"+
		"  annotations: {argocd.argoproj.io/hook: PreSync}\ndata: {k: v}\n")
	repo.write("gen-cluster/gen.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  generateName: a22-gen-\n"+
		"  annotations: {argocd.argoproj.io/hook: PreSync}\n")
	repo.commit("hostile hooks")

	sync := func(t *testing.T, app, path string) *v1alpha1.OperationState {
		t.Helper()
		st := startSync(t, engine, syncer.Request{Application: application(app, ns, repo.dir, path, ns), Project: project}).wait(t, time.Minute)
		t.Log(describeAll(st))
		return st
	}
	still := func(t *testing.T, name string) {
		t.Helper()
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			t.Errorf("ConfigMap %s/%s, which this Application does not track, was deleted", ns, name)
		case err != nil:
			t.Error(err)
		case cm.UID != untouched[name]:
			t.Errorf("ConfigMap %s/%s was deleted and re-created (uid %s, was %s)", ns, name, cm.UID, untouched[name])
		case cm.Data["owner"] != "someone else" || cm.Annotations[syncer.TrackingAnnotation] != "" && name != "a22-victim":
			t.Errorf("ConfigMap %s/%s was taken over: data %v, annotations %v", ns, name, cm.Data, cm.Annotations)
		}
	}

	for _, c := range []struct{ test, app, path, object, want string }{
		{"BeforeHookCreation (the default) on an untracked object", "a22-bhc", "bhc", "a22-bystander", "not tracked by this Application"},
		{"HookSucceeded on an untracked object (adopted by the apply, then deleted)", "a22-hs", "succeeded", "a22-bystander-hs", "not tracked by this Application"},
		{"Helm's before-hook-creation on an object a controller owns", "a22-helm", "helm", "a22-owned", "not tracked by this Application"},
		{"a hook named like another Application's object", "a22-other", "other", "a22-victim", "argocd/a22-victim-app"},
	} {
		t.Run(c.test, func(t *testing.T) {
			st := sync(t, c.app, c.path)
			still(t, c.object)
			if st.Phase == v1alpha1.OperationSucceeded {
				t.Errorf("the operation succeeded: %s", describeAll(st))
			}
			if r := resultsByName(st)["ConfigMap/"+c.object]; r == nil || r.Status != v1alpha1.ResultCodeSyncFailed || !strings.Contains(r.Message, c.want) {
				t.Errorf("want ConfigMap/%s SyncFailed naming %q: %+v", c.object, c.want, r)
			}
		})
	}

	t.Run("this Application's own hooks are deleted and re-created", func(t *testing.T) {
		var uids []types.UID
		for i := 0; i < 2; i++ {
			st := sync(t, "a22-own", "own")
			if st.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("run %d: %s", i, describeAll(st))
			}
			cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "a22-own", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			uids = append(uids, cm.UID)
			if err := absent("ConfigMap a22-own-done (HookSucceeded)", func() error {
				_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "a22-own-done", metav1.GetOptions{})
				return err
			}); err != nil {
				t.Error(err)
			}
			l, err := cs.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, cm := range l.Items {
				if strings.HasPrefix(cm.Name, "a22-gen-") && cm.DeletionTimestamp == nil {
					t.Errorf("the generateName hook %s is still there (HookSucceeded)", cm.Name)
				}
			}
		}
		if uids[0] == uids[1] {
			t.Errorf("BeforeHookCreation did not re-create this Application's own hook a22-own (uid %s both times)", uids[0])
		}
	})

	for _, c := range []struct{ test, app, path, want string }{
		{"a generateName hook in a namespace the project does not permit", "a22-gen-ns", "gen-ns", "namespace default is not permitted"},
		{"a cluster-scoped generateName hook the project does not whitelist", "a22-gen-cluster", "gen-cluster", "is not permitted in project"},
	} {
		t.Run(c.test, func(t *testing.T) {
			st := sync(t, c.app, c.path)
			if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, c.want) {
				t.Errorf("want Error naming %q: %s", c.want, describeAll(st))
			}
		})
	}
	t.Run("no generated object outside the tenant's namespace", func(t *testing.T) {
		l, err := cs.CoreV1().ConfigMaps("default").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range l.Items {
			if strings.HasPrefix(cm.Name, "a22-gen-") {
				t.Errorf("ConfigMap default/%s was created", cm.Name)
			}
		}
		nss, err := cs.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nss.Items {
			if strings.HasPrefix(n.Name, "a22-gen-") {
				t.Errorf("Namespace %s was created", n.Name)
			}
		}
	})
}

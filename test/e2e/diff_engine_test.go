package e2e

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/test/framework"
)

// The engine's diff and drift comparison on the real kube-apiserver, as the
// derived ServiceAccount: a diff dry-runs every object's apply as the
// ServiceAccount and compares it with the live object (a changed value, a
// new object, one to prune; a Secret's values masked); a comparison reads
// only metadata and finds an object edited by another field manager.
func TestEngineDiffAndCompareAsTheServiceAccount(t *testing.T) {
	const ns, sa = "diff-engine", "diff-deployer"
	saUser := "system:serviceaccount:" + ns + ":" + sa
	ensureNamespace(t, ns)
	serviceAccountToken(t, ns, sa)
	grantControllerServiceAccountReads(t)
	role(t, ns, "e2e-diff", ns, sa, rule("", []string{"configmaps", "secrets"}, "get", "list", "watch", "create", "patch", "delete"))
	project := syncProject(t, "diff-engine", v1alpha1.AppProjectSpec{
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, sa)},
	})
	secret := func(password string) string {
		return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\ndata:\n  password: " + base64.StdEncoding.EncodeToString([]byte(password)) + "\n  user: " + base64.StdEncoding.EncodeToString([]byte("admin")) + "\n"
	}
	repo := newGitRepo(t)
	repo.write("app/settings.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n  size: large\n")
	repo.write("app/old.yaml", configMap("old", "app: diff"))
	repo.write("app/secret.yaml", secret("hunter2-first"))
	repo.commit("first")
	waitForGate(t, saUser)
	engine, _ := newSyncEngine(t, enforced)
	app := application("diff-demo", "diff-engine", repo.dir, "app", ns)

	first := engine.Run(t.Context(), syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Prune: true}}, nil)
	if first.Phase != v1alpha1.OperationSucceeded {
		t.Fatal(describe(first))
	}
	app.Status.OperationState = first

	t.Run("right after a sync the diff is empty and the comparison Synced", func(t *testing.T) {
		d, err := engine.Diff(t.Context(), syncer.DiffRequest{Application: app, Project: project})
		if err != nil {
			t.Fatal(err)
		}
		if d.Changed() || d.Identity != saUser || len(d.Resources) != 3 {
			t.Fatalf("diff after a sync: %+v", d)
		}
		cmp, err := engine.Compare(t.Context(), app, project, d.Revisions)
		if err != nil || cmp.Status != v1alpha1.SyncStatusCodeSynced {
			t.Fatalf("compare after a sync: %+v, %v", cmp, err)
		}
	})

	repo.write("app/settings.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: green\n  size: large\n")
	repo.remove("app/old.yaml")
	repo.write("app/new.yaml", configMap("new", "app: diff"))
	repo.write("app/secret.yaml", secret("hunter2-second"))
	repo.commit("second")

	t.Run("the diff shows the changed value, the new object, the one to prune, and a Secret change masked", func(t *testing.T) {
		started := time.Now()
		d, err := engine.Diff(t.Context(), syncer.DiffRequest{Application: app, Project: project})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]v1alpha1.ResourceDiff{}
		for _, r := range d.Resources {
			t.Logf("%s %s %s: %s\n%s", r.Action, r.Kind, r.Name, r.Message, r.Diff)
			byName[r.Kind+"/"+r.Name] = r
		}
		if r := byName["ConfigMap/settings"]; r.Action != v1alpha1.DiffActionUpdate || !strings.Contains(r.Diff, "-  color: blue") || !strings.Contains(r.Diff, "+  color: green") ||
			strings.Contains(r.Diff, "size") && !strings.Contains(r.Diff, " size: large") {
			t.Errorf("settings: %+v", r)
		}
		if r := byName["ConfigMap/new"]; r.Action != v1alpha1.DiffActionCreate || !strings.Contains(r.Diff, "+  greeting: hello") {
			t.Errorf("new: %+v", r)
		}
		if r := byName["ConfigMap/old"]; r.Action != v1alpha1.DiffActionPrune {
			t.Errorf("old: %+v", r)
		}
		r := byName["Secret/creds"]
		if r.Action != v1alpha1.DiffActionUpdate || !strings.Contains(r.Diff, "password: ++++") {
			t.Errorf("creds: %+v", r)
		}
		for _, leak := range []string{"hunter2", base64.StdEncoding.EncodeToString([]byte("hunter2-first")), base64.StdEncoding.EncodeToString([]byte("hunter2-second")), "YWRtaW4="} {
			for _, res := range d.Resources {
				if strings.Contains(res.Diff, leak) || strings.Contains(res.Message, leak) {
					t.Errorf("the diff of %s shows a Secret value (%q)", res.Name, leak)
				}
			}
		}
		if !d.Changed() {
			t.Error("Changed() = false")
		}
		// Nothing changed in the cluster, and every dry run was made as
		// the ServiceAccount.
		cs := admin(t)
		if cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "settings", metav1.GetOptions{}); err != nil || cm.Data["color"] != "blue" {
			t.Errorf("settings after the diff: %v %v", cm.Data, err)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "new", metav1.GetOptions{}); err == nil {
			t.Error("the diff created ConfigMap new")
		}
		for _, ev := range auditedWrites(t, started, 3, func(ev framework.AuditEvent) bool {
			return ev.Verb == "patch" && ev.ObjectRef != nil && ev.ObjectRef.Namespace == ns
		}) {
			if ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != saUser {
				t.Errorf("dry run of %s not as the ServiceAccount: %+v", ev.ObjectRef.Name, ev)
			}
		}
	})

	t.Run("a comparison finds the new revision OutOfSync, with the objects to create and prune", func(t *testing.T) {
		shas, err := engine.ResolveRevisions(t.Context(), app, project)
		if err != nil {
			t.Fatal(err)
		}
		cmp, err := engine.Compare(t.Context(), app, project, shas)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]v1alpha1.ResourceStatus{}
		for _, r := range cmp.Resources {
			got[r.Kind+"/"+r.Name] = r
		}
		if cmp.Status != v1alpha1.SyncStatusCodeOutOfSync || got["ConfigMap/new"].Status != v1alpha1.SyncStatusCodeOutOfSync ||
			!got["ConfigMap/old"].RequiresPruning || got["ConfigMap/settings"].Status != v1alpha1.SyncStatusCodeOutOfSync {
			t.Fatalf("%+v", cmp)
		}
	})

	second := engine.Run(t.Context(), syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Prune: true}}, nil)
	if second.Phase != v1alpha1.OperationSucceeded {
		t.Fatal(describe(second))
	}
	app.Status.OperationState = second
	shas := second.SyncResult.RevisionList()

	t.Run("an edit by another field manager is drift; the diff shows it", func(t *testing.T) {
		// The live-state cache sees the sync's writes (the pruned object's
		// deletion) an instant later.
		eventually(t, "the comparison after the second sync says Synced", func() error {
			cmp, err := engine.Compare(t.Context(), app, project, shas)
			if err != nil || cmp.Status != v1alpha1.SyncStatusCodeSynced {
				return fmt.Errorf("%+v, %v", cmp, err)
			}
			return nil
		})
		cs := admin(t)
		if _, err := cs.CoreV1().ConfigMaps(ns).Patch(t.Context(), "settings", types.MergePatchType, []byte(`{"data":{"color":"red"}}`),
			metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the comparison sees the edit", func() error {
			cmp, err := engine.Compare(t.Context(), app, project, shas)
			if err != nil {
				return err
			}
			for _, r := range cmp.Resources {
				if r.Name == "settings" && r.Status == v1alpha1.SyncStatusCodeOutOfSync && strings.Contains(r.Message, ".data.color") {
					return nil
				}
			}
			return fmt.Errorf("%+v", cmp)
		})
		d, err := engine.Diff(t.Context(), syncer.DiffRequest{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Revision: shas[0]}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range d.Resources {
			if r.Name == "settings" && (r.Action != v1alpha1.DiffActionUpdate || !strings.Contains(r.Diff, "-  color: red") || !strings.Contains(r.Diff, "+  color: green")) {
				t.Errorf("settings: %+v", r)
			}
		}
		// An untracked look-alike is not the Application's business.
		create(t, cs.CoreV1().ConfigMaps(ns).Create, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bystander"}})
	})
}

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/test/framework"
)

// Issue 16, diff as a write (attack 26): the diff of an Application with
// CreateNamespace=true into a namespace that does not exist, a PreSync hook
// with generateName, and a CustomResourceDefinition with a resource of it,
// whose ServiceAccount may create all of these, writes nothing: no
// namespace, no CRD, no hook, and the audit log shows no write by deputy as
// the ServiceAccount other than dry runs and access reviews.
func TestAttack26DiffWritesNothing(t *testing.T) {
	env := setupWaves(t)
	replica := env.start(t)
	const home, dest, crd = "attack26", "attack26-new", "a26widgets.attack26.example.com"
	saUser := "system:serviceaccount:" + home + ":deployer"
	ensureNamespace(t, home)
	serviceAccountToken(t, home, "deployer")
	cs := admin(t)
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "attack26-deployer"}, Rules: []rbacv1.PolicyRule{
		rule("", []string{"namespaces", "configmaps"}, all...),
		rule("apiextensions.k8s.io", []string{"customresourcedefinitions"}, all...),
		rule("attack26.example.com", []string{"a26widgets"}, all...),
	}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "attack26-deployer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: home, Name: "deployer"}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(t.Context(), cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(t.Context(), crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	projects := dynamic.NewForConfigOrDie(cp.Admin).Resource(apps.ApplicationsResource.GroupVersion().WithResource("appprojects")).Namespace(deputyNamespace)
	project := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "deputy.dev/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": "attack26", "namespace": deputyNamespace},
		"spec": map[string]any{
			"sourceNamespaces":         []any{wavesAppNS},
			"sourceRepos":              []any{"*"},
			"destinations":             []any{map[string]any{"server": inCluster, "namespace": dest}, map[string]any{"server": inCluster, "namespace": home}},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
			"destinationServiceAccounts": []any{map[string]any{
				"server": inCluster, "namespace": "*", "defaultServiceAccount": home + ":deployer"}},
		},
	}}
	if _, err := projects.Create(t.Context(), project, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = projects.Delete(ctx, "attack26", metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{})
	})
	c := cp.TokenConfig(serviceAccountToken(t, deputyNamespace, "deputy"))
	eventually(t, "the gate lets deputy-system/deputy act as "+saUser, func() error {
		_, err := impersonating(c, saUser).CoreV1().ConfigMaps(home).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err
	})

	repo := newGitRepo(t)
	repo.write("a26/cm.yaml", configMap("a26-plain", "app: a26"))
	repo.write("a26/hook.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: a26-hook-\n  annotations: {argocd.argoproj.io/hook: PreSync}\ndata: {k: v}\n")
	repo.write("a26/crd.yaml", `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: a26widgets.attack26.example.com}
spec:
  group: attack26.example.com
  names: {kind: A26Widget, plural: a26widgets, singular: a26widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`)
	repo.write("a26/widget.yaml", "apiVersion: attack26.example.com/v1\nkind: A26Widget\nmetadata: {name: a26-widget}\nspec: {size: 3}\n")
	repo.commit("a26")
	app := wavesApplication("a26", repo.dir, "a26")
	app.Spec.Project = "attack26"
	app.Spec.Destination.Namespace = dest
	app.Spec.SyncPolicy = &v1alpha1.SyncPolicy{SyncOptions: []string{"CreateNamespace=true"}}
	createWavesApplication(t, app)

	started := time.Now()
	out, code := deputyDiff(t, replica, "a26")
	t.Logf("deputy diff (exit %d):\n%s", code, out)
	if code != 1 || !strings.Contains(out, "a26-widget") || !strings.Contains(out, "a26-plain") {
		t.Errorf("the diff does not show the objects to create (exit %d)", code)
	}
	time.Sleep(2 * time.Second)
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), dest, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s after the diff: %v (it was created)", dest, err)
	}
	if _, err := dynamicResource("apiextensions.k8s.io", "v1", "customresourcedefinitions").Get(t.Context(), crd, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("CRD %s after the diff: %v (it was created)", crd, err)
	}
	reviews := map[string]bool{"selfsubjectaccessreviews": true, "selfsubjectrulesreviews": true, "subjectaccessreviews": true,
		"localsubjectaccessreviews": true, "tokenreviews": true}
	for _, ev := range auditedWrites(t, started, 0, func(ev framework.AuditEvent) bool {
		return ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username == saUser && ev.ObjectRef != nil && !reviews[ev.ObjectRef.Resource] &&
			!strings.Contains(ev.RequestURI, "dryRun=All")
	}) {
		t.Errorf("a write during the diff: %s %s %s/%s by %s as %s (%s)", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name,
			ev.User.Username, ev.ImpersonatedUser.Username, ev.RequestURI)
	}
}

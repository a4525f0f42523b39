package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/test/framework"
)

const (
	controllerSA = "system:serviceaccount:argocd:argocd-application-controller"
	deployerSA   = "system:serviceaccount:guestbook:guestbook-deployer"
)

var argoProjects = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}

func admin(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	return kubernetes.NewForConfigOrDie(cp.Admin)
}

// create creates obj with the admin client unless it exists.
func create[T any](t *testing.T, f func(context.Context, T, metav1.CreateOptions) (T, error), obj T) {
	t.Helper()
	if _, err := f(t.Context(), obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create %T: %v", obj, err)
	}
}

func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	cs := admin(t)
	create(t, cs.CoreV1().ServiceAccounts(ns).Create, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}})
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// grantConfigMaps lets a ServiceAccount manage ConfigMaps in every namespace
// through cluster RBAC, so that any 403 below comes from deputy's gate.
func grantConfigMaps(t *testing.T, ns, name string) {
	t.Helper()
	cs := admin(t)
	create(t, cs.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-configmap-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}})
	create(t, cs.RbacV1().ClusterRoleBindings().Create, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-configmaps-" + ns + "-" + name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-configmap-editor"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}}})
}

func impersonating(base *rest.Config, userName string, groups ...string) *kubernetes.Clientset {
	c := rest.CopyConfig(base)
	c.Impersonate = rest.ImpersonationConfig{UserName: userName, Groups: groups}
	return kubernetes.NewForConfigOrDie(c)
}

func applyArgoProject(t *testing.T, name string, spec map[string]any) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(cp.Admin)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": name, "namespace": "argocd"}, "spec": spec,
	}}
	data, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	force := true
	if _, err := dyn.Resource(argoProjects).Namespace("argocd").Patch(t.Context(), name, types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: "e2e", Force: &force}); err != nil {
		t.Fatalf("apply AppProject %s: %v", name, err)
	}
}

// eventually retries f until it returns nil or 45s pass (deputy's informers,
// and kube-apiserver's caches of webhook answers and constrained
// impersonation checks, make changes visible after a few seconds).
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if err = f(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: still failing after 45s: %v", what, err)
}

func forbidden(err error, contains string) error {
	if !apierrors.IsForbidden(err) {
		return errString("want 403, got " + errOrNil(err))
	}
	if contains != "" && !strings.Contains(err.Error(), contains) {
		return errString("403 without " + contains + ": " + err.Error())
	}
	return nil
}

type errString string

func (e errString) Error() string { return string(e) }

func errOrNil(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}

// The sync identity holds no impersonate grant at all: deputy allows it to
// impersonate exactly the ServiceAccount its AppProject derives, for the
// actions of a sync in the project's destinations.
func TestSyncIdentityImpersonatesOnlyWhatItsProjectDerives(t *testing.T) {
	for _, ns := range []string{"argocd", "guestbook", "team-a"} {
		ensureNamespace(t, ns)
	}
	token := serviceAccountToken(t, "argocd", "argocd-application-controller")
	serviceAccountToken(t, "guestbook", "guestbook-deployer")
	serviceAccountToken(t, "team-a", "deployer")
	grantConfigMaps(t, "guestbook", "guestbook-deployer")
	grantConfigMaps(t, "team-a", "deployer")
	applyArgoProject(t, "guestbook", map[string]any{
		"sourceRepos":  []any{"*"},
		"destinations": []any{map[string]any{"server": "https://kubernetes.default.svc", "namespace": "guestbook"}},
		"destinationServiceAccounts": []any{map[string]any{
			"server": "https://kubernetes.default.svc", "namespace": "guestbook", "defaultServiceAccount": "guestbook-deployer"}},
	})

	controller := cp.TokenConfig(token)
	asDeployer := impersonating(controller, deployerSA)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "from-sync"}, Data: map[string]string{"k": "v"}}

	eventually(t, "create as the derived ServiceAccount", func() error {
		_, err := asDeployer.CoreV1().ConfigMaps("guestbook").Create(t.Context(), cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	t.Run("get, list, patch and delete in the destination work", func(t *testing.T) {
		cms := asDeployer.CoreV1().ConfigMaps("guestbook")
		if _, err := cms.Get(t.Context(), "from-sync", metav1.GetOptions{}); err != nil {
			t.Errorf("get: %v", err)
		}
		if _, err := cms.List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Errorf("list: %v", err)
		}
		if _, err := cms.Patch(t.Context(), "from-sync", types.MergePatchType, []byte(`{"data":{"k":"v2"}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("patch: %v", err)
		}
		if err := cms.Delete(t.Context(), "from-sync", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete: %v", err)
		}
	})
	t.Run("the controller has no impersonate grant in cluster RBAC", func(t *testing.T) {
		rev, err := admin(t).AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sarFor(controllerSA, "impersonate:serviceaccount", "authentication.k8s.io", "serviceaccounts", "guestbook", "guestbook-deployer"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rev.Status.Allowed {
			t.Fatalf("deputy must allow the derived ServiceAccount: %+v", rev.Status)
		}
		legacy, err := admin(t).AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sarFor(controllerSA, "impersonate", "", "serviceaccounts", "guestbook", "guestbook-deployer"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !legacy.Status.Denied || !strings.Contains(legacy.Status.Reason, "requireConstrained") {
			t.Errorf("legacy impersonate with requireConstrained: %+v, want denied by deputy", legacy.Status)
		}
		if !strings.Contains(rev.Status.Reason, "deputy impersonation gate") {
			t.Errorf("allowed by %q, want deputy's gate (no RBAC grant exists)", rev.Status.Reason)
		}
	})
	t.Run("deputy can-i with --kubeconfig names the project entry", func(t *testing.T) {
		out, err := framework.CLI(deputy.Bin, "can-i", "impersonate:serviceaccount", "serviceaccounts.authentication.k8s.io/guestbook-deployer",
			"-n", "guestbook", "--as", controllerSA, "--config", filepath.Join(work, "deputy.yaml"), "--kubeconfig", cp.AdminKubeconfig)
		if err != nil || !strings.HasPrefix(out, "yes") || !strings.Contains(out, "AppProject argoproj.io argocd/guestbook destinationServiceAccounts[0]") {
			t.Errorf("can-i: %v\n%s", err, out)
		}
		out, err = framework.CLI(deputy.Bin, "can-i", "impersonate:serviceaccount", "serviceaccounts.authentication.k8s.io/deployer",
			"-n", "team-a", "--as", controllerSA, "--config", filepath.Join(work, "deputy.yaml"), "--kubeconfig", cp.AdminKubeconfig)
		if err == nil || !strings.HasPrefix(out, "no") || !strings.Contains(out, "closest") {
			t.Errorf("can-i for an underived ServiceAccount: %v\n%s", err, out)
		}
	})
	t.Run("deputy who-can with --kubeconfig names the sync identity, not an RBAC grant of a protected target", func(t *testing.T) {
		cs := admin(t)
		// mallory holds a cluster RBAC grant to impersonate every
		// ServiceAccount of kube-system, a protected target.
		create(t, cs.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-sa-impersonator"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}},
				{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate:serviceaccount"}},
			}})
		create(t, cs.RbacV1().RoleBindings("kube-system").Create, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-mallory-impersonates", Namespace: "kube-system"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-sa-impersonator"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}})
		args := append([]string{"--config", filepath.Join(work, "deputy.yaml"), "--kubeconfig", cp.AdminKubeconfig}, fileModeArgs()...)
		out, err := framework.CLI(deputy.Bin, append([]string{"who-can", "impersonate:serviceaccount", "serviceaccounts.authentication.k8s.io/guestbook-deployer", "-n", "guestbook"}, args...)...)
		if err != nil || !strings.Contains(out, "ServiceAccount/argocd/argocd-application-controller  AppProject argoproj.io argocd/guestbook destinationServiceAccounts[0]") {
			t.Errorf("who-can for the derived ServiceAccount: %v\n%s", err, out)
		}
		out, err = framework.CLI(deputy.Bin, append([]string{"who-can", "impersonate:serviceaccount", "serviceaccounts.authentication.k8s.io/default", "-n", "kube-system"}, args...)...)
		if err != nil || strings.Contains(out, "\nUser/mallory") || !strings.Contains(out, "not allowed: User/mallory") || !strings.Contains(out, "protected targets") {
			t.Errorf("who-can for a protected target: %v\n%s", err, out)
		}
		out, err = framework.CLI(deputy.Bin, append([]string{"can-i", "--list", "--as", "mallory", "-n", "kube-system"}, args...)...)
		if err != nil || !strings.Contains(out, `cluster RBAC (after deputy's no opinion): RoleBinding "e2e-mallory-impersonates/kube-system" of ClusterRole "e2e-sa-impersonator" to User "mallory"`) ||
			!strings.Contains(out, "strict mode") {
			t.Errorf("can-i --list for mallory: %v\n%s", err, out)
		}
		// kube-apiserver, asking deputy's webhook, agrees with both answers.
		for _, c := range []struct {
			user, ns, name string
			want           bool
		}{{controllerSA, "guestbook", "guestbook-deployer", true}, {"mallory", "kube-system", "default", false}} {
			rev, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: c.user, Groups: []string{"system:authenticated"}, ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: "impersonate:serviceaccount", Group: "authentication.k8s.io", Resource: "serviceaccounts", Namespace: c.ns, Name: c.name}}}, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("SubjectAccessReview for %s impersonating %s/%s: %v", c.user, c.ns, c.name, err)
			} else if rev.Status.Allowed != c.want {
				t.Errorf("SubjectAccessReview for %s impersonating %s/%s: %+v, want allowed=%t", c.user, c.ns, c.name, rev.Status, c.want)
			}
		}
	})
	t.Run("a ServiceAccount in another namespace is 403", func(t *testing.T) {
		_, err := impersonating(controller, "system:serviceaccount:team-a:deployer").CoreV1().ConfigMaps("team-a").List(t.Context(), metav1.ListOptions{})
		if e := forbidden(err, "deputy impersonation gate"); e != nil {
			t.Error(e)
		}
	})
	t.Run("impersonating a user is 403", func(t *testing.T) {
		_, err := impersonating(controller, "alice").CoreV1().ConfigMaps("guestbook").List(t.Context(), metav1.ListOptions{})
		if e := forbidden(err, ""); e != nil {
			t.Error(e)
		}
	})
	t.Run("impersonating a group is 403", func(t *testing.T) {
		_, err := impersonating(controller, deployerSA, "system:masters").CoreV1().ConfigMaps("guestbook").List(t.Context(), metav1.ListOptions{})
		if e := forbidden(err, ""); e != nil {
			t.Error(e)
		}
	})
	t.Run("a request outside the project's destinations is 403 although RBAC would allow it", func(t *testing.T) {
		_, err := asDeployer.CoreV1().ConfigMaps("team-a").List(t.Context(), metav1.ListOptions{})
		if e := forbidden(err, `namespace \"team-a\" is not a destination`); e != nil {
			if e2 := forbidden(err, `namespace "team-a" is not a destination`); e2 != nil {
				t.Error(e)
			}
		}
	})
	t.Run("once the AppProject entry is removed the same call is 403", func(t *testing.T) {
		applyArgoProject(t, "guestbook", map[string]any{
			"sourceRepos":                []any{"*"},
			"destinations":               []any{map[string]any{"server": "https://kubernetes.default.svc", "namespace": "guestbook"}},
			"destinationServiceAccounts": []any{},
		})
		eventually(t, "403 after the entry is removed", func() error {
			_, err := asDeployer.CoreV1().ConfigMaps("guestbook").List(t.Context(), metav1.ListOptions{})
			return forbidden(err, "")
		})
	})
}

// sarFor is an impersonation check as kube-apiserver sends it, asked
// through its SubjectAccessReview API (which runs the same authorizer chain).
func sarFor(userName, verb, group, resource, ns, name string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: userName, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:argocd", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Namespace: ns, Name: name},
	}}
}

// Tokens of deputy's token file (testdata/policy/tokens.csv): carol's is
// stored as its SHA-256, dave's in plain text.
const (
	carolToken = "e2e-carol-token-77ab21"
	daveToken  = "e2e-dave-token-1f09c3"
)

// Strict mode: a user bound to the rule the built-in edit role carries
// (impersonate on serviceaccounts, no resourceNames) can impersonate with
// strict off — RBAC alone allows it — and gets 403 with strict on; a user whose
// rule names resourceNames: [deployer] succeeds.
func TestStrictModeIgnoresRulesWithoutResourceNames(t *testing.T) {
	ensureNamespace(t, "team-a")
	serviceAccountToken(t, "team-a", "deployer")
	grantConfigMaps(t, "team-a", "deployer")
	cs := admin(t)
	create(t, cs.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-edit-like-impersonation"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}}}})
	create(t, cs.RbacV1().RoleBindings("team-a").Create, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol-impersonates"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-edit-like-impersonation"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "carol"}}})
	create(t, cs.RbacV1().Roles("team-a").Create, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "impersonate-deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"deployer"}}}})
	create(t, cs.RbacV1().RoleBindings("team-a").Create, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dave-impersonates-deployer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "impersonate-deployer"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "dave"}}})

	listAs := func(token string) error {
		_, err := impersonating(cp.TokenConfig(token), "system:serviceaccount:team-a:deployer").CoreV1().ConfigMaps("team-a").List(t.Context(), metav1.ListOptions{})
		return err
	}
	t.Run("with strict on, carol's rule without resourceNames does not count", func(t *testing.T) {
		eventually(t, "carol is denied", func() error { return forbidden(listAs(carolToken), "resourceNames") })
	})
	t.Run("with strict on, dave's rule naming the target allows", func(t *testing.T) {
		eventually(t, "dave is allowed", func() error { return listAs(daveToken) })
	})
	t.Run("with strict off, RBAC alone lets carol impersonate", func(t *testing.T) {
		restartDeputy(t, false)
		defer restartDeputy(t, true)
		eventually(t, "carol is allowed", func() error { return listAs(carolToken) })
	})
}

func restartDeputy(t *testing.T, strict bool) {
	t.Helper()
	cfgFile := filepath.Join(work, "deputy.yaml")
	if err := os.WriteFile(cfgFile, []byte(deputyConfig(strict)), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := deputy.Restart(clusterModeArgs(cfgFile)...)
	if err != nil {
		t.Fatal(err)
	}
	deputy = d
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := deputy.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, deputy.Logs())
	}
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
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

// Issue 11, items 6-13: the impersonation gate caps a sync identity to its
// project. Every request goes to kube-apiserver, whose authorization webhook
// is the suite's main deputy; the ServiceAccounts the projects derive are
// cluster-admin in RBAC, so whatever stops them is the gate.

// dryRun makes a write that kube-apiserver authorizes but does not persist.
var dryRun = []string{metav1.DryRunAll}

// Item 6. The gate treated every kind requested with namespace "" as
// cluster-scoped: a project whitelisting every cluster-scoped kind for one
// destination namespace let its ServiceAccount list Secrets across all
// namespaces. The gate decides by the kind's real scope; a namespaced kind
// across all namespaces is allowed only when every namespace is a
// destination.
func TestAttack06KindScope(t *testing.T) {
	s := attackEnv(t)
	sa := s.gateSA(t, "gate-06")
	neg := s.gateSA(t, "gate-06-negated")
	s.gateProject(t, "attack-06", fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: %[2]s}]
  destinationServiceAccounts: [{server: %[1]s, namespace: %[2]s, defaultServiceAccount: gate-06}]
  clusterResourceWhitelist: [{group: "*", kind: "*"}]
`, inCluster, nsB))
	// Every namespace but one is not every namespace.
	s.gateProject(t, "attack-06-negated", fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: "*"}, {server: %[1]s, namespace: "!kube-system"}]
  destinationServiceAccounts: [{server: %[1]s, namespace: "*", defaultServiceAccount: "%[2]s:gate-06-negated"}]
`, inCluster, nsB))
	s.waitGateAllows(t, sa, nsB)
	s.waitGateAllows(t, neg, nsOther)

	dyn := s.deputyDynamic(sa)
	t.Run("cluster-scoped kinds the project whitelists stay allowed", func(t *testing.T) {
		for _, gvr := range []schema.GroupVersionResource{
			{Version: "v1", Resource: "namespaces"},
			{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		} {
			if _, err := dyn.Resource(gvr).List(t.Context(), metav1.ListOptions{Limit: 1}); err != nil {
				t.Errorf("list %s: %v", gvr.Resource, err)
			}
		}
	})
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "secrets"},
		{Version: "v1", Resource: "configmaps"},
		{Version: "v1", Resource: "pods"},
		{Version: "v1", Resource: "serviceaccounts"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "events.k8s.io", Version: "v1", Resource: "events"},
		{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
		{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
		{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
		{Group: "deputy.dev", Version: "v1alpha1", Resource: "applications"},
		{Group: "deputy.dev", Version: "v1alpha1", Resource: "appprojects"},
		{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"},
	} {
		name := gvr.Resource
		if gvr.Group != "" {
			name += "." + gvr.Group
		}
		t.Run("list "+name+" across all namespaces is denied", func(t *testing.T) {
			list, err := dyn.Resource(gvr).List(t.Context(), metav1.ListOptions{})
			if e := gateDenied(err); e != nil {
				n := 0
				if list != nil {
					n = len(list.Items)
				}
				t.Errorf("%v (%d items returned)", e, n)
			}
		})
	}
	t.Run("watch secrets across all namespaces is denied", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		w, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptr(int64(1))})
		if err == nil {
			w.Stop()
		}
		if e := gateDenied(err); e != nil {
			t.Error(e)
		}
	})
	t.Run("a field selector on a destination does not make an all-namespaces list namespaced", func(t *testing.T) {
		_, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).List(t.Context(), metav1.ListOptions{FieldSelector: "metadata.namespace=" + nsB})
		if e := gateDenied(err); e != nil {
			t.Error(e)
		}
	})
	t.Run("a namespaced kind in a namespace that is not a destination is denied", func(t *testing.T) {
		_, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace("kube-system").List(t.Context(), metav1.ListOptions{})
		if e := gateDenied(err); e != nil {
			t.Error(e)
		}
	})
	t.Run("every namespace but kube-system is not every namespace", func(t *testing.T) {
		_, err := s.deputyDynamic(neg).Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).List(t.Context(), metav1.ListOptions{})
		if e := gateDenied(err); e != nil {
			t.Error(e)
		}
	})
	// Last, because the gate's caps are the union of an impersonator's
	// projects (an impersonate-on check does not say which ServiceAccount
	// is impersonated): once a project has every namespace as destination,
	// every ServiceAccount deputy impersonates may list across them.
	t.Run("a project whose destinations are every namespace may list across all namespaces", func(t *testing.T) {
		all := s.gateSA(t, "gate-06-all")
		s.gateProject(t, "attack-06-all", fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: "*"}]
  destinationServiceAccounts: [{server: %[1]s, namespace: "*", defaultServiceAccount: "%[2]s:gate-06-all"}]
`, inCluster, nsB))
		eventually(t, "list secrets -A as "+all, func() error {
			_, err := s.deputyDynamic(all).Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).List(t.Context(), metav1.ListOptions{Limit: 1})
			return err
		})
	})
}

func ptr[T any](v T) *T { return &v }

// deputyDynamic is a dynamic client as deputy-system/deputy impersonating saUser.
func (s *attackSuite) deputyDynamic(saUser string) *dynamic.DynamicClient {
	c := cp.TokenConfig(s.deputyTok)
	c.Impersonate = rest.ImpersonationConfig{UserName: saUser}
	return dynamic.NewForConfigOrDie(c)
}

// Item 7. Any subresource was allowed in a destination namespace: the sync
// identity minted a token for another ServiceAccount (serviceaccounts/token)
// and used it to do what the gate denied; pods/exec was allowed too. Only an
// allow-list of subresources passes (by default get on */status, */scale and
// pods/log), and the list is configurable.
func TestAttack07Subresources(t *testing.T) {
	s := attackEnv(t)
	sa := s.gateSA(t, "gate-07")
	s.gateProject(t, "attack-07", fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: %[2]s}]
  destinationServiceAccounts: [{server: %[1]s, namespace: %[2]s, defaultServiceAccount: gate-07}]
  clusterResourceWhitelist: [{group: "", kind: Node}]
`, inCluster, nsB))
	s.applyT(t, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: a07-target, namespace: %[1]s}
---
apiVersion: v1
kind: Pod
metadata: {name: a07-pod, namespace: %[1]s}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]
---
# Another Pod for the checks after the gate's configuration changes:
# kube-apiserver caches an allowed impersonation of the same request.
apiVersion: v1
kind: Pod
metadata: {name: a07-pod-2, namespace: %[1]s}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: a07-deploy, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: a07}}
  template:
    metadata: {labels: {app: a07}}
    spec: {containers: [{name: c, image: registry.k8s.io/pause:3.10}]}
---
apiVersion: v1
kind: Service
metadata: {name: a07-svc, namespace: %[1]s}
spec:
  ports: [{port: 80}]
`, nsB))
	s.waitGateAllows(t, sa, nsB)
	cs := s.deputyClient(sa)
	pods := func(verb, sub string) *rest.Request {
		var r *rest.Request
		switch verb {
		case "get":
			r = cs.CoreV1().RESTClient().Get()
		default:
			r = cs.CoreV1().RESTClient().Post()
		}
		return r.Namespace(nsB).Resource("pods").Name("a07-pod").SubResource(sub)
	}

	t.Run("the default allow-list passes", func(t *testing.T) {
		for name, f := range map[string]func() error{
			"get pods/log": func() error { return pods("get", "log").Do(t.Context()).Error() },
			"get pods/status": func() error {
				_, err := cs.CoreV1().RESTClient().Get().Namespace(nsB).Resource("pods").Name("a07-pod").SubResource("status").DoRaw(t.Context())
				return err
			},
			"get deployments/scale": func() error {
				_, err := cs.AppsV1().Deployments(nsB).GetScale(t.Context(), "a07-deploy", metav1.GetOptions{})
				return err
			},
			"get deployments/status": func() error {
				_, err := cs.AppsV1().RESTClient().Get().Namespace(nsB).Resource("deployments").Name("a07-deploy").SubResource("status").DoRaw(t.Context())
				return err
			},
		} {
			eventually(t, name, func() error { return notForbidden(f()) })
		}
	})
	for _, c := range []struct {
		name string
		call func(t *testing.T) error
	}{
		{"create serviceaccounts/token for another ServiceAccount", func(t *testing.T) error {
			tr, err := cs.CoreV1().ServiceAccounts(nsB).CreateToken(t.Context(), "a07-target", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			if err == nil && tr.Status.Token != "" {
				t.Errorf("a token for %s/a07-target was minted", nsB)
			}
			return err
		}},
		{"create serviceaccounts/token for itself", func(t *testing.T) error {
			_, err := cs.CoreV1().ServiceAccounts(nsB).CreateToken(t.Context(), "gate-07", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}},
		{"create pods/exec", func(t *testing.T) error {
			return pods("create", "exec").Param("command", "id").Param("stdout", "true").Do(t.Context()).Error()
		}},
		{"get pods/exec (the WebSocket form)", func(t *testing.T) error {
			return pods("get", "exec").Param("command", "id").Param("stdout", "true").Do(t.Context()).Error()
		}},
		{"create pods/attach", func(t *testing.T) error {
			return pods("create", "attach").Param("stdout", "true").Do(t.Context()).Error()
		}},
		{"get pods/attach", func(t *testing.T) error { return pods("get", "attach").Param("stdout", "true").Do(t.Context()).Error() }},
		{"create pods/portforward", func(t *testing.T) error {
			return pods("create", "portforward").Param("ports", "80").Do(t.Context()).Error()
		}},
		{"get pods/portforward", func(t *testing.T) error {
			return pods("get", "portforward").Param("ports", "80").Do(t.Context()).Error()
		}},
		{"get pods/proxy", func(t *testing.T) error { return pods("get", "proxy").Do(t.Context()).Error() }},
		{"get services/proxy", func(t *testing.T) error {
			return cs.CoreV1().RESTClient().Get().Namespace(nsB).Resource("services").Name("a07-svc").SubResource("proxy").Do(t.Context()).Error()
		}},
		{"get nodes/proxy of a whitelisted kind", func(t *testing.T) error {
			return cs.CoreV1().RESTClient().Get().Resource("nodes").Name("a07-node").SubResource("proxy").Do(t.Context()).Error()
		}},
		{"patch pods/ephemeralcontainers", func(t *testing.T) error {
			_, err := cs.CoreV1().Pods(nsB).Patch(t.Context(), "a07-pod", types.StrategicMergePatchType,
				[]byte(`{"spec":{"ephemeralContainers":[{"name":"debug","image":"busybox","command":["sh"]}]}}`), metav1.PatchOptions{DryRun: dryRun}, "ephemeralcontainers")
			return err
		}},
		{"update pods/ephemeralcontainers", func(t *testing.T) error {
			p, err := admin(t).CoreV1().Pods(nsB).Get(t.Context(), "a07-pod", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug2", Image: "busybox"}})
			_, err = cs.CoreV1().Pods(nsB).UpdateEphemeralContainers(t.Context(), "a07-pod", p, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}},
		{"create pods/eviction", func(t *testing.T) error {
			return cs.PolicyV1().Evictions(nsB).Evict(t.Context(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "a07-pod", Namespace: nsB},
				DeleteOptions: &metav1.DeleteOptions{DryRun: dryRun}})
		}},
		{"create pods/binding", func(t *testing.T) error {
			return cs.CoreV1().Pods(nsB).Bind(t.Context(), &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "a07-pod", Namespace: nsB},
				Target: corev1.ObjectReference{Kind: "Node", Name: "a07-node"}}, metav1.CreateOptions{DryRun: dryRun})
		}},
		{"update deployments/scale", func(t *testing.T) error {
			sc, err := admin(t).AppsV1().Deployments(nsB).GetScale(t.Context(), "a07-deploy", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sc.Spec.Replicas = 5
			_, err = cs.AppsV1().Deployments(nsB).UpdateScale(t.Context(), "a07-deploy", sc, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}},
		{"patch deployments/status", func(t *testing.T) error {
			_, err := cs.AppsV1().Deployments(nsB).Patch(t.Context(), "a07-deploy", types.MergePatchType, []byte(`{"status":{"replicas":3}}`), metav1.PatchOptions{DryRun: dryRun}, "status")
			return err
		}},
		{"update pods/status", func(t *testing.T) error {
			p, err := admin(t).CoreV1().Pods(nsB).Get(t.Context(), "a07-pod", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = cs.CoreV1().Pods(nsB).UpdateStatus(t.Context(), p, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}},
	} {
		t.Run(c.name+" is denied", func(t *testing.T) {
			if e := gateDenied(c.call(t)); e != nil {
				t.Error(e)
			}
		})
	}

	t.Run("the allow-list is configurable", func(t *testing.T) {
		withGateConfig(t, func(cfg map[string]any) {
			impersonation(cfg)["subresources"] = []any{
				map[string]any{"resource": "*/status", "verbs": []any{"get"}},
				map[string]any{"resource": "pods/portforward", "verbs": []any{"get", "create"}},
			}
		})
		s.waitGateAllows(t, sa, nsB)
		eventually(t, "pods/portforward once listed", func() error {
			return notForbidden(pods("create", "portforward").Param("ports", "80").Do(t.Context()).Error())
		})
		if e := gateDenied(pods("create", "exec").Param("command", "id").Param("stdout", "true").Do(t.Context()).Error()); e != nil {
			t.Errorf("pods/exec: %v", e)
		}
		if e := gateDenied(cs.CoreV1().RESTClient().Get().Namespace(nsB).Resource("pods").Name("a07-pod-2").SubResource("log").Do(t.Context()).Error()); e != nil {
			t.Errorf("pods/log, no longer listed (the configured list replaces the default): %v", e)
		}
	})
}

// Item 8. Creating a Namespace needed clusterResourceWhitelist, but updating
// or deleting a destination's Namespace object did not. Every verb on
// Namespaces follows the same rule.
func TestAttack08NamespaceObjects(t *testing.T) {
	s := attackEnv(t)
	const target = "attack-ns-08"
	s.applyT(t, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n", target))
	sa := s.gateSA(t, "gate-08")
	s.gateProject(t, "attack-08", fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: %[2]s}]
  destinationServiceAccounts: [{server: %[1]s, namespace: %[2]s, defaultServiceAccount: "%[3]s:gate-08"}]
`, inCluster, target, nsB))
	s.waitGateAllows(t, sa, target)
	cs := s.deputyClient(sa)
	nss := cs.CoreV1().Namespaces()

	for _, c := range []struct {
		name string
		call func(t *testing.T) error
	}{
		{"patch the destination's Namespace (a label)", func(t *testing.T) error {
			_, err := nss.Patch(t.Context(), target, types.MergePatchType, []byte(`{"metadata":{"labels":{"attack":"patched"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"update the destination's Namespace", func(t *testing.T) error {
			ns, err := admin(t).CoreV1().Namespaces().Get(t.Context(), target, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ns.Labels["attack"] = "updated"
			_, err = nss.Update(t.Context(), ns, metav1.UpdateOptions{})
			return err
		}},
		{"server-side apply the destination's Namespace", func(t *testing.T) error {
			force := true
			_, err := nss.Patch(t.Context(), target, types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+target+`","labels":{"attack":"applied"}}}`),
				metav1.PatchOptions{FieldManager: "attacker", Force: &force, DryRun: dryRun})
			return err
		}},
		{"delete the destination's Namespace", func(t *testing.T) error {
			return nss.Delete(t.Context(), target, metav1.DeleteOptions{DryRun: dryRun})
		}},
		{"get the destination's Namespace (every verb, strictest reading)", func(t *testing.T) error {
			_, err := nss.Get(t.Context(), target, metav1.GetOptions{})
			return err
		}},
		{"update namespaces/status", func(t *testing.T) error {
			ns, err := admin(t).CoreV1().Namespaces().Get(t.Context(), target, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = nss.UpdateStatus(t.Context(), ns, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}},
		{"update namespaces/finalize", func(t *testing.T) error {
			ns, err := admin(t).CoreV1().Namespaces().Get(t.Context(), target, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = nss.Finalize(t.Context(), ns, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}},
		{"patch a Namespace that is not a destination", func(t *testing.T) error {
			_, err := nss.Patch(t.Context(), nsOther, types.MergePatchType, []byte(`{"metadata":{"labels":{"attack":"patched"}}}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		}},
	} {
		t.Run(c.name+" is denied without clusterResourceWhitelist", func(t *testing.T) {
			if e := gateDenied(c.call(t)); e != nil {
				t.Error(e)
			}
		})
	}
	t.Run("the Namespace was not changed", func(t *testing.T) {
		ns, err := admin(t).CoreV1().Namespaces().Get(t.Context(), target, metav1.GetOptions{})
		if err != nil || ns.DeletionTimestamp != nil {
			t.Fatalf("namespace %s: %v (deletion %v)", target, err, ns.DeletionTimestamp)
		}
		if v, ok := ns.Labels["attack"]; ok {
			t.Errorf("the attacker labelled the Namespace: attack=%s", v)
		}
	})
	// Last: the gate caps an impersonator by the union of its projects, so
	// once one project whitelists Namespace every ServiceAccount deputy
	// impersonates may act on Namespaces.
	t.Run("a project whitelisting Namespace may patch it", func(t *testing.T) {
		whitelisted := s.gateSA(t, "gate-08-whitelisted")
		s.gateProject(t, "attack-08-whitelisted", fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: %[2]s}]
  destinationServiceAccounts: [{server: %[1]s, namespace: %[2]s, defaultServiceAccount: "%[3]s:gate-08-whitelisted"}]
  clusterResourceWhitelist: [{group: "", kind: Namespace}]
`, inCluster, target, nsB))
		eventually(t, "patch as "+whitelisted, func() error {
			_, err := s.deputyClient(whitelisted).CoreV1().Namespaces().Patch(t.Context(), target, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"allowed":"yes"}}}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		})
	})
}

// Item 9. In non-strict mode kube-apiserver's constrained impersonation
// first asks whether the requester may impersonate every group at once
// (name "*"), and deputy left that to RBAC, so a protected group rode along
// with three others. A wildcard target never passes the protection of a
// protected target, in every mode and both impersonation shapes.
func TestAttack09WildcardTargets(t *testing.T) {
	s := attackEnv(t)
	const protected = "attack:protected-admins"
	s.applyT(t, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: attack-09-protected-admins}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: %[1]q}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: legacy-mallory, namespace: %[2]s}
---
# Impersonation rules like the built-in edit role's: no resourceNames.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: attack-09-impersonator}
rules:
- apiGroups: ["", authentication.k8s.io]
  resources: [users, groups]
  verbs: [impersonate, "impersonate:user-info"]
- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["impersonate-on:user-info:list", "impersonate-on:user-info:get", "impersonate-on:user-info:create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: attack-09-mallory}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: attack-09-impersonator}
subjects: [{kind: ServiceAccount, name: mallory, namespace: %[2]s}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: attack-09-legacy-impersonator}
rules:
- apiGroups: [""]
  resources: [users, groups]
  verbs: [impersonate]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: attack-09-legacy-mallory}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: attack-09-legacy-impersonator}
subjects: [{kind: ServiceAccount, name: legacy-mallory, namespace: %[2]s}]
`, protected, nsB))
	legacyTok, err := saToken(t.Context(), nsB, "legacy-mallory")
	if err != nil {
		t.Fatal(err)
	}
	protect := func(strict bool) func(cfg map[string]any) {
		return func(cfg map[string]any) {
			im := impersonation(cfg)
			im["strict"] = strict
			im["protectedTargets"] = map[string]any{
				"groups":                   []any{"system:masters", protected},
				"userPrefixes":             []any{"system:kube-"},
				"serviceAccountNamespaces": []any{"kube-system"},
			}
		}
	}
	// Each case impersonates a user name of its own: kube-apiserver caches
	// a successful impersonation for about 10 seconds, across deputy's
	// restarts.
	var users atomic.Int64
	as := func(token string, groups ...string) (*kubernetes.Clientset, string) {
		name := fmt.Sprintf("attack-someone-%d", users.Add(1))
		c := cp.TokenConfig(token)
		c.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: groups}
		return kubernetes.NewForConfigOrDie(c), name
	}
	// The real effect: listing team A's Secrets as the protected group.
	readVictimSecrets := func(t *testing.T, cs *kubernetes.Clientset) error {
		list, err := cs.CoreV1().Secrets(nsA).List(t.Context(), metav1.ListOptions{})
		if err == nil {
			t.Errorf("team A's Secrets were listed (%d items)", len(list.Items))
		}
		return err
	}
	// impersonationRefused checks that kube-apiserver refused the
	// impersonation itself (not the impersonated user's request).
	impersonationRefused := func(err error, user string) error {
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("want 403 refusing the impersonation, got %v", err)
		}
		if strings.Contains(err.Error(), fmt.Sprintf("User %q cannot", user)) {
			return fmt.Errorf("the impersonation was allowed (the impersonated user was refused instead): %v", err)
		}
		return nil
	}
	works := func(t *testing.T, token string) {
		t.Helper()
		cs, name := as(token, "attack:g1", "attack:g2", "attack:g3", "attack:g4")
		eventually(t, "SelfSubjectReview as "+name, func() error {
			r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if r.Status.UserInfo.Username != name {
				return fmt.Errorf("user %q", r.Status.UserInfo.Username)
			}
			return nil
		})
	}
	constrained := []struct {
		name  string
		group []string
	}{
		{"a protected group among four", []string{"attack:g1", "attack:g2", "attack:g3", protected}},
		{"a protected group among six", []string{"attack:g1", "attack:g2", "attack:g3", "attack:g4", "attack:g5", protected}},
		{"the group \"*\" itself", []string{"*"}},
		{"\"*\" among four groups", []string{"attack:g1", "attack:g2", "attack:g3", "*"}},
	}
	legacy := []struct {
		name  string
		group []string
	}{
		{"a protected group among four", []string{"attack:g1", "attack:g2", "attack:g3", protected}},
		{"the group \"*\" itself", []string{"*"}},
	}
	for _, mode := range []struct {
		name   string
		strict bool
	}{{"non-strict mode", false}, {"strict mode", true}} {
		t.Run(mode.name, func(t *testing.T) {
			withGateConfig(t, protect(mode.strict))
			if !mode.strict {
				t.Run("control: impersonating four unprotected groups works (constrained)", func(t *testing.T) { works(t, s.malloryTok) })
				t.Run("control: impersonating four unprotected groups works (legacy)", func(t *testing.T) { works(t, legacyTok) })
			}
			for _, c := range constrained {
				t.Run(c.name+" is denied (constrained impersonation)", func(t *testing.T) {
					cs, _ := as(s.malloryTok, c.group...)
					if e := gateDenied(readVictimSecrets(t, cs)); e != nil {
						t.Error(e)
					}
				})
			}
			// A requester with only the legacy verb: kube-apiserver reports
			// the error of the constrained mode it tried first, so only
			// the refusal itself can be checked.
			for _, c := range legacy {
				t.Run(c.name+" is denied (legacy impersonation)", func(t *testing.T) {
					cs, name := as(legacyTok, c.group...)
					if e := impersonationRefused(readVictimSecrets(t, cs), name); e != nil {
						t.Error(e)
					}
				})
			}
		})
	}
}

// Item 10. Strict mode denied, finally and over RBAC, checks kube-apiserver
// never sends for impersonation: verb impersonate on jobs.batch, on
// non-resource paths, and unknown impersonate:<mode> verbs, breaking
// whoever uses such verbs for their own purposes. The gate claims only the
// impersonation shapes kube-apiserver sends and has no opinion on the rest.
func TestAttack10StrictDenialScope(t *testing.T) {
	s := attackEnv(t)
	const bystander = "attack-bystander"
	s.applyT(t, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: attack-10-custom-verbs}
rules:
- apiGroups: [batch]
  resources: [jobs]
  verbs: [impersonate]
- nonResourceURLs: ["/attack/*"]
  verbs: [impersonate]
- apiGroups: [authentication.k8s.io]
  resources: [users]
  verbs: ["impersonate:attack-mode"]
- apiGroups: [""]
  resources: [configmaps]
  verbs: ["impersonate-on:attack-mode:get"]
- apiGroups: [example.com]
  resources: [users]
  verbs: [impersonate]
- apiGroups: [""]
  resources: [uids, users/status]
  verbs: [impersonate]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [impersonate, "impersonate:serviceaccount"]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: attack-10-custom-verbs}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: attack-10-custom-verbs}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %[1]s}
- {kind: ServiceAccount, name: deputy, namespace: %[2]s}
`, bystander, deputyNamespace))
	subjects := []struct {
		name, user string
		groups     []string
	}{
		{"a subject under strict mode", bystander, nil},
		{"a configured sync identity", deputyUser, []string{"system:serviceaccounts", "system:serviceaccounts:" + deputyNamespace}},
	}
	notShapes := []struct {
		name string
		ra   *authorizationv1.ResourceAttributes
		nra  *authorizationv1.NonResourceAttributes
	}{
		{"verb impersonate on jobs.batch", &authorizationv1.ResourceAttributes{Verb: "impersonate", Group: "batch", Resource: "jobs", Namespace: nsB, Name: "x"}, nil},
		{"verb impersonate on a non-resource path", nil, &authorizationv1.NonResourceAttributes{Verb: "impersonate", Path: "/attack/x"}},
		{"an unknown impersonate:<mode> verb", &authorizationv1.ResourceAttributes{Verb: "impersonate:attack-mode", Group: "authentication.k8s.io", Resource: "users", Name: "x"}, nil},
		{"an unknown impersonate-on:<mode>:<verb> verb", &authorizationv1.ResourceAttributes{Verb: "impersonate-on:attack-mode:get", Resource: "configmaps", Namespace: nsB, Name: "x"}, nil},
		{"impersonate on users of another API group", &authorizationv1.ResourceAttributes{Verb: "impersonate", Group: "example.com", Resource: "users", Name: "x"}, nil},
		{"impersonate on uids of the core group", &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "uids", Name: "x"}, nil},
		{"impersonate on a subresource of users", &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Subresource: "status", Name: "x"}, nil},
		{"impersonate:serviceaccount on the core group", &authorizationv1.ResourceAttributes{Verb: "impersonate:serviceaccount", Resource: "serviceaccounts", Namespace: nsB, Name: "deployer"}, nil},
	}
	for _, sub := range subjects {
		t.Run(sub.name, func(t *testing.T) {
			// Once RBAC answers an ordinary verb of the same role, it has
			// seen the binding.
			eventually(t, "RBAC sees the binding", func() error {
				st := sar(t, sub.user, sub.groups, &authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: nsB, Name: "x"}, nil)
				if !st.Allowed {
					return fmt.Errorf("%+v", st)
				}
				return nil
			})
			for _, c := range notShapes {
				t.Run(c.name+" is left to RBAC", func(t *testing.T) {
					st := sar(t, sub.user, sub.groups, c.ra, c.nra)
					if !st.Allowed || st.Denied || !strings.Contains(st.Reason, "RBAC") {
						t.Errorf("%+v, want allowed by RBAC", st)
					}
				})
			}
			t.Run("control: legacy impersonation of a ServiceAccount is still the gate's", func(t *testing.T) {
				st := sar(t, sub.user, sub.groups, &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: nsB, Name: "deployer"}, nil)
				if st.Allowed || !st.Denied || !strings.Contains(st.Reason, "deputy impersonation gate") {
					t.Errorf("%+v, want denied by the gate", st)
				}
			})
		})
	}
}

// Item 11. The default impersonator honoured deputy.dev AppProjects in every
// namespace, and Applications used the project of their own namespace: a
// tenant allowed to write AppProjects in its namespace derived any
// ServiceAccount for any destination. AppProjects grant only from the
// configured project namespaces (default deputy's own), and an Application
// outside it may use a project only if the project's sourceNamespaces admit
// the Application's namespace.
func TestAttack11AppProjectNamespaces(t *testing.T) {
	s := attackEnv(t)
	// Team B may now write AppProjects in its own namespace.
	s.applyT(t, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: attack-11-project-writer, namespace: %[1]s}
rules:
- apiGroups: [deputy.dev, argoproj.io]
  resources: [appprojects]
  verbs: [get, list, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: attack-11-project-writer, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: attack-11-project-writer}
subjects: [{kind: ServiceAccount, name: mallory, namespace: %[1]s}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: a11-evil-sa, namespace: %[2]s}
`, nsB, nsOther))
	control := s.gateSA(t, "a11-control")
	mallory := dynamic.NewForConfigOrDie(cp.TokenConfig(s.malloryTok))
	writeProject := func(t *testing.T, group, name, spec string) {
		t.Helper()
		u := &unstructured.Unstructured{}
		if err := yamlToObject(fmt.Sprintf("apiVersion: %s/v1alpha1\nkind: AppProject\nmetadata: {name: %s, namespace: %s, labels: {%s: \"true\"}}\nspec:\n%s", group, name, nsB, attackLabel, spec), u); err != nil {
			t.Fatal(err)
		}
		res := mallory.Resource(schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "appprojects"}).Namespace(nsB)
		if _, err := res.Create(t.Context(), u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("mallory creates AppProject %s/%s: %v", nsB, name, err)
		}
		t.Cleanup(func() {
			_ = dynamic.NewForConfigOrDie(cp.Admin).Resource(schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "appprojects"}).
				Namespace(nsB).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	// The attacker's project: team A's namespace and another one as
	// destinations, team A's ServiceAccount and one of its own choosing.
	evilSpec := fmt.Sprintf(`  sourceRepos: ["*"]
  sourceNamespaces: [%[2]s]
  destinations: [{server: %[1]s, namespace: %[3]s}, {server: %[1]s, namespace: %[4]s}]
  destinationServiceAccounts:
  - {server: %[1]s, namespace: %[3]s, defaultServiceAccount: deployer}
  - {server: %[1]s, namespace: %[4]s, defaultServiceAccount: a11-evil-sa}
`, inCluster, nsB, nsA, nsOther)
	writeProject(t, "deputy.dev", "a11-evil", evilSpec)
	writeProject(t, "argoproj.io", "a11-evil-argo", strings.ReplaceAll(evilSpec, "a11-evil-sa", "a11-evil-argo-sa"))
	// A project the operator writes at the same time: once the gate allows
	// its ServiceAccount, the gate has seen the attacker's projects too.
	s.gateProject(t, "attack-11-control", fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: %[2]s}]
  destinationServiceAccounts: [{server: %[1]s, namespace: %[2]s, defaultServiceAccount: a11-control}]
`, inCluster, nsB))
	s.waitGateAllows(t, control, nsB)

	deputyGroups := []string{"system:serviceaccounts", "system:serviceaccounts:" + deputyNamespace}
	for _, c := range []struct {
		name string
		ra   authorizationv1.ResourceAttributes
	}{
		{"the gate does not derive a ServiceAccount from a deputy.dev AppProject in a tenant namespace",
			authorizationv1.ResourceAttributes{Verb: "impersonate:serviceaccount", Group: "authentication.k8s.io", Resource: "serviceaccounts", Namespace: nsOther, Name: "a11-evil-sa"}},
		{"the gate does not derive a ServiceAccount from an argoproj.io AppProject in a tenant namespace",
			authorizationv1.ResourceAttributes{Verb: "impersonate:serviceaccount", Group: "authentication.k8s.io", Resource: "serviceaccounts", Namespace: nsOther, Name: "a11-evil-argo-sa"}},
		{"the gate does not make a tenant project's destination reachable",
			authorizationv1.ResourceAttributes{Verb: "impersonate-on:serviceaccount:create", Resource: "configmaps", Namespace: nsOther}},
		{"legacy impersonation of the tenant project's ServiceAccount is denied",
			authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: nsOther, Name: "a11-evil-sa"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := sar(t, deputyUser, deputyGroups, &c.ra, nil)
			if st.Allowed || !strings.Contains(st.Reason, "deputy impersonation gate") {
				t.Errorf("%+v, want denied by the gate", st)
			}
		})
	}

	// The engine: Applications of team B trying to reach team A's namespace.
	s.startReplica(t, nil)
	s.waitGateAllows(t, "system:serviceaccount:"+nsA+":deployer", nsA)
	if _, err := s.git.Commit("/team-b/a11.git", "reach team A", []framework.GitFile{
		{Path: "app/cm.yaml", Content: cmYAML("a11-pwned", "by", "team-b")},
		{Path: "app/backdoor.yaml", Content: fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: a11-backdoor}
rules: [{apiGroups: [""], resources: [secrets], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: a11-backdoor}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: a11-backdoor}
subjects: [{kind: ServiceAccount, name: mallory, namespace: %s}]
`, nsB)},
	}); err != nil {
		t.Fatal(err)
	}
	repo := s.git.RepoURL("/team-b/a11.git")
	toA := func(name, project string) tenantApp {
		return tenantApp{ns: nsB, name: name, project: project, repoURL: repo, path: "app", dest: nsA}
	}
	nothingReachedA := func(t *testing.T) {
		t.Helper()
		cs := admin(t)
		if _, err := cs.CoreV1().ConfigMaps(nsA).Get(t.Context(), "a11-pwned", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the attacker's ConfigMap is in team A's namespace (err %v)", err)
		}
		if _, err := cs.RbacV1().RoleBindings(nsA).Get(t.Context(), "a11-backdoor", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the attacker's RoleBinding is in team A's namespace (err %v)", err)
		}
		if _, err := kubernetes.NewForConfigOrDie(cp.TokenConfig(s.malloryTok)).CoreV1().Secrets(nsA).List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("mallory lists team A's Secrets: %v", err)
		}
	}
	t.Run("an Application naming team A's project is refused by sourceNamespaces", func(t *testing.T) {
		st := s.syncAndWait(t, toA("a11-victim-project", projA))
		wantRefused(t, st, projA, "sourceNamespaces")
		nothingReachedA(t)
	})
	t.Run("an Application naming the attacker's own AppProject is refused", func(t *testing.T) {
		st := s.syncAndWait(t, toA("a11-evil-project", "a11-evil"))
		wantRefused(t, st, "a11-evil")
		nothingReachedA(t)
	})
	t.Run("a tenant AppProject shadowing team A's project name is ignored", func(t *testing.T) {
		writeProject(t, "deputy.dev", projA, evilSpec)
		st := s.syncAndWait(t, toA("a11-shadow", projA))
		wantRefused(t, st, projA, "sourceNamespaces")
		nothingReachedA(t)
	})
}

func yamlToObject(text string, u *unstructured.Unstructured) error {
	objs, err := decodeObjects(text)
	if err != nil {
		return err
	}
	if len(objs) != 1 {
		return fmt.Errorf("%d objects", len(objs))
	}
	*u = *objs[0]
	return nil
}

// Item 12. Argo CD 3.x whitelist and blacklist entries carry a name glob;
// deputy dropped it: a whitelist entry for ClusterRoles named guestbook-*
// let the sync identity delete any ClusterRole, and a blacklist entry for
// Namespaces named kube-* blocked every Namespace. Every narrowing field is
// honoured (or the project is refused naming it, never silently dropped),
// and the reason names the entry that decided.
func TestAttack12NamedWhitelistEntries(t *testing.T) {
	s := attackEnv(t)
	// The project's only destination is a namespace of its own: the gate's
	// caps are the union of the impersonator's projects, and the tenants'
	// projects permit everything in theirs.
	const dest = "attack-ns-12"
	sa := s.gateSA(t, "gate-12")
	s.applyT(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: attack-victim-role}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: attack-guestbook-ui}
rules: []
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app-settings, namespace: %[1]s}
`, dest))
	spec := func(saName string) string {
		return fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: %[2]s}]
  destinationServiceAccounts: [{server: %[1]s, namespace: %[2]s, defaultServiceAccount: "%[4]s:%[3]s"}]
  clusterResourceWhitelist:
  - {group: rbac.authorization.k8s.io, kind: ClusterRole, name: "attack-guestbook-*"}
  - {group: "", kind: Namespace}
  clusterResourceBlacklist:
  - {group: "", kind: Namespace, name: "kube-*"}
`, inCluster, dest, saName, nsB)
	}
	// Created the way kubectl create or Argo CD would (not a server-side
	// apply, which refuses fields the CRD does not declare): a CRD without
	// the name fields silently drops them.
	s.createT(t, fmt.Sprintf("apiVersion: deputy.dev/v1alpha1\nkind: AppProject\nmetadata: {name: attack-12, namespace: %s}\nspec:\n%s", deputyNamespace, spec("gate-12")))
	s.waitGateAllows(t, sa, dest)
	cs := s.deputyClient(sa)
	crs := cs.RbacV1().ClusterRoles()

	t.Run("the stored AppProject keeps the name of every entry", func(t *testing.T) {
		u, err := dynamic.NewForConfigOrDie(cp.Admin).Resource(schema.GroupVersionResource{Group: "deputy.dev", Version: "v1alpha1", Resource: "appprojects"}).
			Namespace(deputyNamespace).Get(t.Context(), "attack-12", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for field, want := range map[string]string{"clusterResourceWhitelist": "attack-guestbook-*", "clusterResourceBlacklist": "kube-*"} {
			entries, _, _ := unstructured.NestedSlice(u.Object, "spec", field)
			if len(entries) == 0 {
				t.Errorf("spec.%s is empty", field)
				continue
			}
			if name, _ := entries[0].(map[string]any)["name"].(string); name != want {
				t.Errorf("spec.%s[0].name is %q, want %q (dropped)", field, name, want)
			}
		}
	})
	// Controls first: what the entries allow is allowed.
	t.Run("what the named entries allow is allowed", func(t *testing.T) {
		eventually(t, "delete attack-guestbook-ui", func() error {
			return crs.Delete(t.Context(), "attack-guestbook-ui", metav1.DeleteOptions{DryRun: dryRun})
		})
		eventually(t, "patch a Namespace outside kube-*", func() error {
			_, err := cs.CoreV1().Namespaces().Patch(t.Context(), nsOther, types.MergePatchType, []byte(`{"metadata":{"labels":{"a12":"ok"}}}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		})
	})
	for _, c := range []struct {
		name, reason string
		call         func(t *testing.T) error
	}{
		{"delete a ClusterRole the whitelist entry does not name", "clusterResourceWhitelist", func(t *testing.T) error {
			return crs.Delete(t.Context(), "attack-victim-role", metav1.DeleteOptions{DryRun: dryRun})
		}},
		{"patch a ClusterRole the whitelist entry does not name", "clusterResourceWhitelist", func(t *testing.T) error {
			_, err := crs.Patch(t.Context(), "attack-victim-role", types.MergePatchType, []byte(`{"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		}},
		{"create a ClusterRole the whitelist entry does not name", "clusterResourceWhitelist", func(t *testing.T) error {
			_, err := crs.Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "attack-not-guestbook"}}, metav1.CreateOptions{DryRun: dryRun})
			return err
		}},
		{"get a ClusterRole the whitelist entry does not name", "clusterResourceWhitelist", func(t *testing.T) error {
			_, err := crs.Get(t.Context(), "attack-victim-role", metav1.GetOptions{})
			return err
		}},
		{"list ClusterRoles, which a name-scoped entry cannot filter (strictest reading)", "", func(t *testing.T) error {
			_, err := crs.List(t.Context(), metav1.ListOptions{})
			return err
		}},
		{"patch a Namespace the blacklist entry names", "clusterResourceBlacklist", func(t *testing.T) error {
			_, err := cs.CoreV1().Namespaces().Patch(t.Context(), "kube-public", types.MergePatchType, []byte(`{"metadata":{"labels":{"a12":"x"}}}`), metav1.PatchOptions{DryRun: dryRun})
			return err
		}},
		{"delete a Namespace the blacklist entry names", "clusterResourceBlacklist", func(t *testing.T) error {
			return cs.CoreV1().Namespaces().Delete(t.Context(), "kube-system", metav1.DeleteOptions{DryRun: dryRun})
		}},
	} {
		t.Run(c.name+" is denied", func(t *testing.T) {
			var subs []string
			if c.reason != "" {
				subs = append(subs, c.reason)
			}
			if e := gateDenied(c.call(t), subs...); e != nil {
				t.Error(e)
			}
		})
	}
	t.Run("the ClusterRole still exists", func(t *testing.T) {
		if _, err := admin(t).RbacV1().ClusterRoles().Get(t.Context(), "attack-victim-role", metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
	})
	t.Run("an argoproj.io AppProject's named entry binds Argo CD's controller", func(t *testing.T) {
		ensureNamespace(t, "argocd")
		ctrlTok := serviceAccountToken(t, "argocd", "argocd-application-controller")
		argoSA := s.gateSA(t, "gate-12-argo")
		s.createT(t, fmt.Sprintf("apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {name: attack-12, namespace: argocd}\nspec:\n%s", spec("gate-12-argo")))
		c := cp.TokenConfig(ctrlTok)
		c.Impersonate = rest.ImpersonationConfig{UserName: argoSA}
		ctrl := kubernetes.NewForConfigOrDie(c)
		eventually(t, "the controller acts as "+argoSA, func() error {
			_, err := ctrl.CoreV1().ConfigMaps(dest).Get(t.Context(), "app-settings", metav1.GetOptions{})
			return err
		})
		if e := gateDenied(ctrl.RbacV1().ClusterRoles().Delete(t.Context(), "attack-victim-role", metav1.DeleteOptions{DryRun: dryRun}), "clusterResourceWhitelist"); e != nil {
			t.Error(e)
		}
	})
	// A name on a namespaced entry: honoured by the gate, or the project is
	// refused naming the field; never dropped (which would widen a
	// blacklist entry to every Secret, or a whitelist entry to every
	// ConfigMap, without a word).
	t.Run("a name on a namespaced entry is honoured or refused, never dropped", func(t *testing.T) {
		const nsDest = "attack-ns-12b"
		nsSA := s.gateSA(t, "gate-12b")
		s.applyT(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Secret
metadata: {name: db-password, namespace: %[1]s}
stringData: {password: secret}
---
apiVersion: v1
kind: Secret
metadata: {name: app-token, namespace: %[1]s}
stringData: {token: t}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app-settings, namespace: %[1]s}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: other-settings, namespace: %[1]s}
`, nsDest))
		u := &unstructured.Unstructured{}
		if err := yamlToObject(fmt.Sprintf(`apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: attack-12-namespaced, namespace: %[5]s, labels: {%[6]s: "true"}}
spec:
  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: %[2]s}]
  destinationServiceAccounts: [{server: %[1]s, namespace: %[2]s, defaultServiceAccount: "%[4]s:%[3]s"}]
  namespaceResourceWhitelist:
  - {group: "", kind: ConfigMap, name: "app-*"}
  - {group: "", kind: Secret}
  namespaceResourceBlacklist:
  - {group: "", kind: Secret, name: "db-*"}
`, inCluster, nsDest, "gate-12b", nsB, deputyNamespace, attackLabel), u); err != nil {
			t.Fatal(err)
		}
		projects := dynamic.NewForConfigOrDie(cp.Admin).Resource(schema.GroupVersionResource{Group: "deputy.dev", Version: "v1alpha1", Resource: "appprojects"}).Namespace(deputyNamespace)
		stored, err := projects.Create(t.Context(), u, metav1.CreateOptions{})
		if err != nil {
			if !strings.Contains(err.Error(), "name") {
				t.Fatalf("the project was refused without naming the field: %v", err)
			}
			t.Logf("refused, naming the field: %v", err)
			return
		}
		t.Cleanup(func() { _ = projects.Delete(context.Background(), "attack-12-namespaced", metav1.DeleteOptions{}) })
		for field, want := range map[string]string{"namespaceResourceWhitelist": "app-*", "namespaceResourceBlacklist": "db-*"} {
			entries, _, _ := unstructured.NestedSlice(stored.Object, "spec", field)
			name := ""
			if len(entries) > 0 {
				name, _ = entries[0].(map[string]any)["name"].(string)
			}
			if name != want {
				t.Fatalf("accepted, but spec.%s[0].name is %q, want %q: silently dropped", field, name, want)
			}
		}
		ncs := s.deputyClient(nsSA)
		eventually(t, "get Secret app-token", func() error {
			_, err := ncs.CoreV1().Secrets(nsDest).Get(t.Context(), "app-token", metav1.GetOptions{})
			return err
		})
		eventually(t, "get ConfigMap app-settings", func() error {
			_, err := ncs.CoreV1().ConfigMaps(nsDest).Get(t.Context(), "app-settings", metav1.GetOptions{})
			return err
		})
		for _, c := range []struct {
			name, reason string
			call         func(t *testing.T) error
		}{
			{"get a Secret the blacklist entry names", "namespaceResourceBlacklist", func(t *testing.T) error {
				_, err := ncs.CoreV1().Secrets(nsDest).Get(t.Context(), "db-password", metav1.GetOptions{})
				return err
			}},
			{"list Secrets, which a name-scoped blacklist entry cannot filter (strictest reading)", "", func(t *testing.T) error {
				_, err := ncs.CoreV1().Secrets(nsDest).List(t.Context(), metav1.ListOptions{})
				return err
			}},
			{"get a ConfigMap the whitelist entry does not name", "namespaceResourceWhitelist", func(t *testing.T) error {
				_, err := ncs.CoreV1().ConfigMaps(nsDest).Get(t.Context(), "other-settings", metav1.GetOptions{})
				return err
			}},
			{"get a kind the whitelist does not list", "namespaceResourceWhitelist", func(t *testing.T) error {
				_, err := ncs.CoreV1().ServiceAccounts(nsDest).Get(t.Context(), "default", metav1.GetOptions{})
				return err
			}},
		} {
			t.Run(c.name+" is denied", func(t *testing.T) {
				var subs []string
				if c.reason != "" {
					subs = append(subs, c.reason)
				}
				if e := gateDenied(c.call(t), subs...); e != nil {
					t.Error(e)
				}
			})
		}
	})
}

// Item 13. With requireConstrained false (the example's setting) a denied
// impersonate-on check made kube-apiserver fall back to legacy impersonate,
// which the gate allowed to impersonators: the sync identity read ConfigMaps
// outside every destination. Impersonators are constrained by default;
// legacy impersonation is an explicit opt-in.
func TestAttack13LegacyFallback(t *testing.T) {
	s := attackEnv(t)
	sa := s.gateSA(t, "gate-13")
	s.gateProject(t, "attack-13", fmt.Sprintf(`  sourceRepos: ["*"]
  destinations: [{server: %[1]s, namespace: %[2]s}]
  destinationServiceAccounts: [{server: %[1]s, namespace: %[2]s, defaultServiceAccount: gate-13}]
`, inCluster, nsB))
	// nsOther is a destination of no project of deputy-system/deputy (the
	// gate caps an impersonator by the union of its projects).
	s.applyT(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: a13-pod, namespace: %[1]s}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]
---
apiVersion: v1
kind: Secret
metadata: {name: a13-secret, namespace: %[2]s}
stringData: {password: outside-every-destination}
`, nsB, nsOther))
	s.waitGateAllows(t, sa, nsB)

	t.Run("with requireConstrained left unset", func(t *testing.T) {
		withGateConfig(t, func(cfg map[string]any) { delete(impersonation(cfg), "requireConstrained") })
		s.waitGateAllows(t, sa, nsB)
		cs := s.deputyClient(sa)
		for _, c := range []struct {
			name string
			call func(t *testing.T) error
		}{
			{"list ConfigMaps outside every destination", func(t *testing.T) error {
				_, err := cs.CoreV1().ConfigMaps(nsOther).List(t.Context(), metav1.ListOptions{})
				return err
			}},
			{"get a Secret outside every destination", func(t *testing.T) error {
				sec, err := cs.CoreV1().Secrets(nsOther).Get(t.Context(), "a13-secret", metav1.GetOptions{})
				if err == nil && len(sec.Data) > 0 {
					t.Errorf("the Secret outside every destination was read")
				}
				return err
			}},
			{"create a ConfigMap outside every destination", func(t *testing.T) error {
				_, err := cs.CoreV1().ConfigMaps(nsOther).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a13-legacy"}}, metav1.CreateOptions{})
				return err
			}},
			{"list Namespaces (not whitelisted)", func(t *testing.T) error {
				_, err := cs.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
				return err
			}},
			{"get a non-resource path", func(t *testing.T) error {
				return cs.CoreV1().RESTClient().Get().AbsPath("/metrics").Do(t.Context()).Error()
			}},
			{"create pods/exec in the destination", func(t *testing.T) error {
				return cs.CoreV1().RESTClient().Post().Namespace(nsB).Resource("pods").Name("a13-pod").SubResource("exec").
					Param("command", "id").Param("stdout", "true").Do(t.Context()).Error()
			}},
		} {
			t.Run(c.name+" is denied", func(t *testing.T) {
				if e := gateDenied(c.call(t)); e != nil {
					t.Error(e)
				}
			})
		}
		if _, err := admin(t).CoreV1().ConfigMaps(nsOther).Get(t.Context(), "a13-legacy", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the ConfigMap outside every destination was created (err %v)", err)
			_ = admin(t).CoreV1().ConfigMaps(nsOther).Delete(t.Context(), "a13-legacy", metav1.DeleteOptions{})
		}
	})
	t.Run("requireConstrained false is the explicit opt-in that gives up the per-action caps", func(t *testing.T) {
		withGateConfig(t, func(cfg map[string]any) { impersonation(cfg)["requireConstrained"] = false })
		s.waitGateAllows(t, sa, nsB)
		eventually(t, "legacy fallback outside the destinations", func() error {
			_, err := s.deputyClient(sa).CoreV1().ConfigMaps(nsOther).List(t.Context(), metav1.ListOptions{Limit: 1})
			return err
		})
	})
}

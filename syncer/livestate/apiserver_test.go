//go:build envtest

// These tests run the cache against a real kube-apiserver and etcd
// (envtest): a real watch sees an edit by another field manager and not a
// status write, and a ServiceAccount (impersonated) without list permission
// gets Forbidden until it is granted. They are behind the envtest build tag:
//
//	KUBEBUILDER_ASSETS=$PWD/bin go test -tags envtest -run APIServer ./syncer/livestate/

package livestate_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"deputy.dev/deputy/syncer/livestate"
)

const trackingAnnotation = "deputy.dev/tracking-id"

// controlPlane starts kube-apiserver and etcd for one test and returns the
// admin configuration.
func controlPlane(t *testing.T) *rest.Config {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd (make test-binaries puts them in bin/)")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: 2 * time.Minute}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd (envtest): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}

// impersonating is the NewClient of a controller: a metadata client acting
// as the scope's identity.
func impersonating(cfg *rest.Config) func(context.Context, livestate.Scope) (metadata.Interface, error) {
	return func(_ context.Context, s livestate.Scope) (metadata.Interface, error) {
		c := rest.CopyConfig(cfg)
		if s.Identity != "" {
			c.Impersonate = rest.ImpersonationConfig{UserName: s.Identity}
		}
		return metadata.NewForConfig(c)
	}
}

func TestAPIServerDriftAndPermissions(t *testing.T) {
	cfg := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc := kubernetes.NewForConfigOrDie(cfg)
	const ns = "drift"
	must(t, create(ctx, kc, ns))

	changes := make(chan string, 100)
	cache, err := livestate.New(livestate.Options{
		NewClient:          impersonating(cfg),
		TrackingAnnotation: trackingAnnotation,
		OnChange:           func(s string, _ Scope) { changes <- s },
	})
	must(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); cache.Run(runCtx) }()
	defer func() { stop(); <-done }()

	cms := livestate.Scope{Server: cfg.Host, GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: ns}
	deps := livestate.Scope{Server: cfg.Host, GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespace: ns}
	for _, s := range []livestate.Scope{cms, deps} {
		objs, err := cache.List(ctx, s)
		must(t, err)
		var names []string
		for _, o := range objs {
			names = append(names, o.Name)
		}
		if !strings.Contains(strings.Join(names, ","), map[bool]string{true: "cm", false: "web"}[s == cms]) {
			t.Fatalf("List(%s) = %v", s, names)
		}
	}
	next := func(step, want string) {
		t.Helper()
		select {
		case got := <-changes:
			if got != want {
				t.Fatalf("%s: OnChange(%q), want OnChange(%q)", step, got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no OnChange", step)
		}
	}

	// The Deployment's status written by its controller: nothing. A
	// tracked Deployment created afterwards in the same scope: its call is
	// the first.
	web, err := kc.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	must(t, err)
	web.Status.Replicas, web.Status.ObservedGeneration = 1, web.Generation
	_, err = kc.AppsV1().Deployments(ns).UpdateStatus(ctx, web, metav1.UpdateOptions{FieldManager: "kube-controller-manager"})
	must(t, err)
	_, err = kc.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "marker", ns+"/marker"), metav1.CreateOptions{FieldManager: "deputy"})
	must(t, err)
	next("status write, then a tracked create", ns+"/marker")

	// kubectl edit of the ConfigMap's data: another field manager.
	cm, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
	must(t, err)
	cm.Data["k"] = "edited"
	_, err = kc.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	must(t, err)
	next("kubectl edit", ns+"/app")

	// A ServiceAccount without list permission: Forbidden, then granted.
	_, err = kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "viewer"}}, metav1.CreateOptions{})
	must(t, err)
	as := cms
	as.Identity = "system:serviceaccount:" + ns + ":viewer"
	_, err = cache.List(ctx, as)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "configmaps") || !strings.Contains(err.Error(), `namespace "drift"`) {
		t.Fatalf("List as a ServiceAccount without permission = %v, want Forbidden naming configmaps in drift", err)
	}
	_, err = kc.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = kc.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "viewer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: ns}},
	}, metav1.CreateOptions{})
	must(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		objs, err := cache.List(ctx, as)
		if err == nil {
			if len(objs) == 0 {
				t.Fatal("the granted ServiceAccount sees no ConfigMap")
			}
			break
		}
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			t.Fatalf("List after the grant = %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := cache.Stats(); st.Scopes != 3 {
		t.Errorf("Stats = %+v, want 3 scopes (admin's configmaps and deployments, the viewer's configmaps)", st)
	}
}

// create makes the namespace, a tracked ConfigMap and a tracked Deployment
// (field manager deputy).
func create(ctx context.Context, kc kubernetes.Interface, ns string) error {
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Annotations: map[string]string{trackingAnnotation: ns + "/app"}},
		Data:       map[string]string{"k": "v"},
	}
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{FieldManager: "deputy"}); err != nil {
		return err
	}
	_, err := kc.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "web", ns+"/app"), metav1.CreateOptions{FieldManager: "deputy"})
	return err
}

func deployment(ns, name, app string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{trackingAnnotation: app}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
			},
		},
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

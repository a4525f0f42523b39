package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/test/framework"
)

// deputy's API through kube-apiserver's aggregation layer: an APIService
// for sync.deputy.dev/v1alpha1 (deputy.dev/v1alpha1 itself is the CRDs'),
// an ExternalName Service pointing at the e2e deputy, and kube-apiserver's
// front-proxy identity (--proxy-client-cert-file), which deputy trusts for
// the request headers (api.requestHeader).

const (
	aggregatedServiceNamespace = "deputy-system"
	aggregatedServiceName      = "deputy-api"
	// aggregatedServiceHost is the name kube-apiserver verifies deputy's
	// serving certificate for; main_test.go adds it to the certificate.
	aggregatedServiceHost = aggregatedServiceName + "." + aggregatedServiceNamespace + ".svc"
	aggregatedNamespace   = "e2e-main-deputy" // the e2e deputy's sync.applicationNamespaces
)

var appProjectsResource = apps.ApplicationsResource.GroupVersion().WithResource("appprojects")

func kubectlAs(t *testing.T, token string, stdin []byte, args ...string) (string, error) {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteTokenKubeconfig(kc, token); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := framework.Kubectl(t.Context(), stdin, append([]string{"--kubeconfig", kc}, args...)...)
	return out + stderr, err
}

func TestAggregatedAPIThroughKubeAPIServer(t *testing.T) {
	cs := admin(t)
	ensureNamespace(t, aggregatedServiceNamespace)
	ensureNamespace(t, aggregatedNamespace)
	create(t, cs.CoreV1().Services(aggregatedServiceNamespace).Create, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: aggregatedServiceName},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	})
	caPEM, err := os.ReadFile(filepath.Join(deputy.CertDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	port := int32(deputy.Port)
	agg := aggregator.NewForConfigOrDie(cp.Admin)
	apiService := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1alpha1.sync.deputy.dev"},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "sync.deputy.dev", Version: "v1alpha1", GroupPriorityMinimum: 1000, VersionPriority: 15,
			Service:  &apiregistrationv1.ServiceReference{Namespace: aggregatedServiceNamespace, Name: aggregatedServiceName, Port: &port},
			CABundle: caPEM,
		},
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(t.Context(), apiService, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agg.ApiregistrationV1().APIServices().Delete(context.Background(), apiService.Name, metav1.DeleteOptions{})
	})
	eventually(t, "the APIService is Available", func() error {
		s, err := agg.ApiregistrationV1().APIServices().Get(t.Context(), apiService.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range s.Status.Conditions {
			if c.Type == apiregistrationv1.Available {
				if c.Status == apiregistrationv1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("%s: %s", c.Reason, c.Message)
			}
		}
		return fmt.Errorf("no Available condition yet")
	})

	// An Application in the namespace the e2e deputy reconciles; whether its
	// sync succeeds does not matter here, only who may ask for it.
	dyn := dynamic.NewForConfigOrDie(cp.Admin)
	project := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "deputy.dev/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": "agg", "namespace": aggregatedNamespace},
		"spec": map[string]any{"sourceRepos": []any{"*"},
			"destinations": []any{map[string]any{"server": inCluster, "namespace": aggregatedNamespace}}},
	}}
	if _, err := dyn.Resource(appProjectsResource).Namespace(aggregatedNamespace).Create(t.Context(), project, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	app := &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Namespace: aggregatedNamespace, Name: "agg"},
		Spec: v1alpha1.ApplicationSpec{Project: "agg",
			Source:      v1alpha1.ApplicationSource{RepoURL: filepath.Join(t.TempDir(), "no-such-repo")},
			Destination: v1alpha1.ApplicationDestination{Server: inCluster, Namespace: aggregatedNamespace}}}
	createApplication(t, app)

	// alice may sync it, in both groups (kube-apiserver checks
	// sync.deputy.dev, deputy checks deputy.dev); carol may not.
	policyFile := filepath.Join(extraPolicy, "aggregation.yaml")
	if err := os.WriteFile(policyFile, []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: application-syncer, namespace: `+aggregatedNamespace+`}
rules:
- apiGroups: [deputy.dev, sync.deputy.dev]
  resources: [applications, applications/sync]
  verbs: [get, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-syncs, namespace: `+aggregatedNamespace+`}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: application-syncer}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(policyFile) })

	raw := "/apis/sync.deputy.dev/v1alpha1/namespaces/" + aggregatedNamespace + "/applications/agg/sync"
	t.Run("an allowed user's kubectl create --raw reaches deputy's sync endpoint", func(t *testing.T) {
		var out string
		eventually(t, "alice's sync is accepted", func() error {
			var err error
			if out, err = kubectlAs(t, aliceToken, []byte(`{"dryRun":true}`), "create", "--raw", raw, "-f", "-"); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		if !strings.Contains(out, `"username":"alice"`) {
			t.Errorf("the answer does not record alice as the initiator: %s", out)
		}
		recorded := getApplication(t, aggregatedNamespace, "agg")
		if recorded.Operation == nil && (recorded.Status.OperationState == nil || recorded.Status.OperationState.Operation.InitiatedBy.Username != "alice") {
			t.Errorf("no operation by alice recorded on the Application: %+v", recorded)
		}
		if !strings.Contains(deputy.Logs(), `msg="api audit"`) || !strings.Contains(deputy.Logs(), `user=alice`) {
			t.Errorf("deputy wrote no audit line for alice's request")
		}
	})
	t.Run("another user gets 403", func(t *testing.T) {
		out, err := kubectlAs(t, carolToken, []byte(`{}`), "create", "--raw", raw, "-f", "-")
		if err == nil || !strings.Contains(out, "forbidden") || !strings.Contains(out, "carol") {
			t.Errorf("carol: %v %s, want 403 naming carol", err, out)
		}
	})
	t.Run("front-proxy headers without the proxy's client certificate are ignored", func(t *testing.T) {
		client, err := deputy.Client(false)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, deputy.URL+raw, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Remote-User", "alice")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("status %d, want 401", resp.StatusCode)
		}
	})
}

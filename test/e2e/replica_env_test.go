package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/test/framework"
)

// replicaEnv is what the tests that start their own cluster-mode replicas
// share: a directory, a kubeconfig of deputy's own ServiceAccount (with
// manifests/base/rbac.yaml applied: deputy's RBAC exactly as the install
// grants it, no impersonate rule) and the replicas' policy directory.
type replicaEnv struct {
	dir        string
	kubeconfig string
	policyDir  string
}

func newReplicaEnv(t *testing.T) *replicaEnv {
	t.Helper()
	rbacFile := filepath.Join(framework.RepoRoot(), "manifests", "base", "rbac.yaml")
	if out, stderr, err := cp.Kubectl(t.Context(), nil, "apply", "-f", rbacFile); err != nil {
		t.Fatalf("kubectl apply -f %s: %v\n%s%s", rbacFile, err, out, stderr)
	}
	env := &replicaEnv{dir: t.TempDir()}
	env.kubeconfig = filepath.Join(env.dir, "deputy.kubeconfig")
	if err := cp.WriteTokenKubeconfig(env.kubeconfig, serviceAccountToken(t, deputyNamespace, "deputy")); err != nil {
		t.Fatal(err)
	}
	env.policyDir = filepath.Join(env.dir, "policy")
	if err := os.Mkdir(env.policyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	return env
}

// writePolicy writes the replicas' policy: a token for user (group "e2e")
// and a role letting user get, diff (create: diff --local) and sync Applications, in namespace or
// (namespace "") everywhere.
func (e *replicaEnv) writePolicy(t *testing.T, user, token, namespace string) {
	t.Helper()
	kind, ns := "ClusterRole", ""
	if namespace != "" {
		kind, ns = "Role", ", namespace: "+namespace
	}
	files := map[string]string{
		"tokens.csv": token + "," + user + "," + user + "-uid,\"e2e\"\n",
		"rbac.yaml": fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: %[1]s
metadata: {name: application-syncer%[2]s}
rules:
- apiGroups: [deputy.dev]
  resources: [applications, applications/sync, applications/diff]
  verbs: [get, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: %[1]sBinding
metadata: {name: %[3]s-syncs%[2]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: %[1]s, name: application-syncer}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %[3]s}
`, kind, ns, user),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(e.policyDir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// createDeputyAppProject creates (if missing) the deputy.dev AppProject
// name in deputy's own namespace (where AppProjects grant, by default):
// Applications in appNamespace may use it (sourceNamespaces), sources
// anywhere, destination destNamespace, deployed as ServiceAccount sa there.
func createDeputyAppProject(t *testing.T, name, appNamespace, destNamespace, sa string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "deputy.dev/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": name, "namespace": deputyNamespace},
		"spec": map[string]any{
			"sourceNamespaces": []any{appNamespace},
			"sourceRepos":      []any{"*"},
			"destinations":     []any{map[string]any{"server": inCluster, "namespace": destNamespace}},
			"destinationServiceAccounts": []any{map[string]any{
				"server": inCluster, "namespace": destNamespace, "defaultServiceAccount": sa}},
		},
	}}
	gvr := apps.ApplicationsResource.GroupVersion().WithResource("appprojects")
	if _, err := dynamic.NewForConfigOrDie(cp.Admin).Resource(gvr).Namespace(deputyNamespace).Create(t.Context(), u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create AppProject %s: %v", name, err)
	}
}

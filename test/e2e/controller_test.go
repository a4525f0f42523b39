package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/test/framework"
)

// Cluster mode with two replicas: both serve, the Lease holder runs
// operations. deputy runs as the ServiceAccount deputy-system/deputy with
// only the RBAC the install manifests give it (no impersonate rule): the
// impersonation of the project's ServiceAccount is granted by the e2e
// deputy's gate, which lists deputy-system/deputy as an impersonator.

const (
	haAppNamespace  = "ha-apps"
	haDestNamespace = "ha-dest"
	haDeployer      = "ha-deployer"
	haOperatorToken = "e2e-ha-operator-token-77b2e1"
	haLease         = "deputy-sync" // the name manifests/base/rbac.yaml lets deputy update
	haGitHubSecret  = "e2e-github-webhook-secret"
	haLeaseDuration = 4 * time.Second
)

// haReplica is one `deputy serve` replica of the pair.
type haReplica struct {
	name string
	*framework.Deputy
}

// haSetup creates deputy's identity and RBAC, the AppProject, the
// destination's ServiceAccount and the replicas' configuration; it returns
// the `deputy serve` arguments of replica name.
type haEnv struct{ *replicaEnv }

func setupHA(t *testing.T) *haEnv {
	t.Helper()
	cs := admin(t)
	for _, ns := range []string{"deputy-system", haAppNamespace, haDestNamespace} {
		ensureNamespace(t, ns)
	}
	env := &haEnv{replicaEnv: newReplicaEnv(t)}

	// The project's ServiceAccount may manage ConfigMaps in the destination.
	create(t, cs.CoreV1().ServiceAccounts(haDestNamespace).Create, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: haDeployer}})
	role(t, haDestNamespace, haDeployer, haDestNamespace, haDeployer,
		rule("", []string{"configmaps"}, "get", "list", "watch", "create", "update", "patch", "delete"))
	applyDeputyProject(t)

	// The replicas' own policy: an operator token allowed to sync.
	env.writePolicy(t, "ha-operator", haOperatorToken, "")
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(env.dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("github-secret", haGitHubSecret)
	return env
}

// applyDeputyProject creates the deputy.dev AppProject "ha" in deputy's own
// namespace (where AppProjects grant, by default): Applications in ha-apps
// may use it (sourceNamespaces), sources anywhere, destination ha-dest,
// deployed as ha-deployer.
func applyDeputyProject(t *testing.T) {
	t.Helper()
	createDeputyAppProject(t, "ha", haAppNamespace, haDestNamespace, haDeployer)
}

func (e *haEnv) start(t *testing.T, name string) *haReplica {
	t.Helper()
	cfg := fmt.Sprintf(`apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
sync:
  impersonation: {enabled: true}
  cacheDir: %s
  localRepositories: [%s]
  applicationNamespaces: [%s]
  leaderElection:
    leaseNamespace: deputy-system
    leaseName: %s
    identity: %s
    leaseDuration: %s
    renewDeadline: 3s
    retryPeriod: 500ms
  webhook:
    githubSecretFile: %s
`, filepath.Join(e.dir, "cache-"+name), repoRoot, haAppNamespace, haLease, name, haLeaseDuration, filepath.Join(e.dir, "github-secret"))
	cfgFile := filepath.Join(e.dir, name+".yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, err := framework.DeputyBinary()
	if err != nil {
		t.Fatal(err)
	}
	d, err := framework.StartDeputy(framework.DeputyOptions{Bin: bin, CertDir: deputy.CertDir,
		Args: []string{"--config", cfgFile, "--kubeconfig", e.kubeconfig, "--policy", e.policyDir}})
	if err != nil {
		t.Fatal(err)
	}
	r := &haReplica{name: name, Deputy: d}
	t.Cleanup(func() {
		_ = d.Stop()
		if t.Failed() {
			t.Logf("deputy %s log:\n%s", name, d.Logs())
		}
	})
	return r
}

// leaseHolder returns the Lease's holder and its transitions.
func leaseHolder(t *testing.T) (string, int32) {
	t.Helper()
	l, err := admin(t).CoordinationV1().Leases("deputy-system").Get(t.Context(), haLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", 0
	}
	if err != nil {
		t.Fatal(err)
	}
	holder, transitions := "", int32(0)
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions
	}
	return holder, transitions
}

func waitLeader(t *testing.T, name string) {
	t.Helper()
	eventually(t, "replica "+name+" holds the Lease", func() error {
		if h, _ := leaseHolder(t); h != name {
			return fmt.Errorf("holder %q", h)
		}
		return nil
	})
}

func applicationsClient() dynamic.NamespaceableResourceInterface {
	return dynamic.NewForConfigOrDie(cp.Admin).Resource(apps.ApplicationsResource)
}

func createApplication(t *testing.T, app *v1alpha1.Application) {
	t.Helper()
	app.APIVersion, app.Kind = "deputy.dev/v1alpha1", "Application"
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(app)
	if err != nil {
		t.Fatal(err)
	}
	delete(content, "status")
	if _, err := applicationsClient().Namespace(app.Namespace).Create(t.Context(), &unstructured.Unstructured{Object: content}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Application %s: %v", app.Name, err)
	}
}

func getApplication(t *testing.T, ns, name string) *v1alpha1.Application {
	t.Helper()
	u, err := applicationsClient().Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	app := &v1alpha1.Application{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, app); err != nil {
		t.Fatal(err)
	}
	return app
}

// waitOperationDone waits until the Application records no operation and
// its state is final, and returns that state.
func waitOperationDone(t *testing.T, ns, name string, timeout time.Duration) *v1alpha1.OperationState {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		app := getApplication(t, ns, name)
		st := app.Status.OperationState
		if app.Operation == nil && st != nil && st.Phase != v1alpha1.OperationRunning {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(app, "", "  ")
			t.Fatalf("the operation of %s/%s did not end within %s:\n%s", ns, name, timeout, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func haApplication(name, repo, revision string, automated bool) *v1alpha1.Application {
	app := &v1alpha1.Application{
		ObjectMeta: metav1.ObjectMeta{Namespace: haAppNamespace, Name: name},
		Spec: v1alpha1.ApplicationSpec{
			Project:     "ha",
			Source:      v1alpha1.ApplicationSource{RepoURL: repo, Path: name, TargetRevision: revision},
			Destination: v1alpha1.ApplicationDestination{Server: inCluster, Namespace: haDestNamespace},
		},
	}
	if automated {
		app.Spec.SyncPolicy = &v1alpha1.SyncPolicy{Automated: &v1alpha1.SyncPolicyAutomated{}}
	}
	return app
}

func (r *haReplica) post(t *testing.T, path, token string, body string) (int, string) {
	t.Helper()
	client, err := r.Client(false)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func syncPath(name string) string {
	return "/apis/deputy.dev/v1alpha1/namespaces/" + haAppNamespace + "/applications/" + name + "/sync"
}

// configMapsOf returns the ConfigMaps of the destination by name.
func configMapsOf(t *testing.T) map[string]corev1.ConfigMap {
	t.Helper()
	list, err := admin(t).CoreV1().ConfigMaps(haDestNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.ConfigMap{}
	for _, cm := range list.Items {
		out[cm.Name] = cm
	}
	return out
}

func TestClusterModeLeaderRunsOperationsAndHandsOver(t *testing.T) {
	env := setupHA(t)
	// An object in the destination that no Application manages: it must
	// never be touched.
	sentinel, err := admin(t).CoreV1().ConfigMaps(haDestNamespace).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "not-managed", Labels: map[string]string{"app": "small"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	repo := newGitRepo(t)
	for i := range 3 {
		repo.write(fmt.Sprintf("small/cm-%d.yaml", i), configMap(fmt.Sprintf("small-%d", i), "app: small"))
	}
	const big = 300
	for i := range big {
		repo.write(fmt.Sprintf("big/cm-%03d.yaml", i), configMap(fmt.Sprintf("big-%03d", i), "app: big"))
	}
	repo.commit("apps")
	createApplication(t, haApplication("small", repo.dir, "", false))
	createApplication(t, haApplication("big", repo.dir, "", false))

	a := env.start(t, "deputy-a")
	waitLeader(t, "deputy-a")
	b := env.start(t, "deputy-b")
	if err := b.WaitReady(t.Context()); err != nil {
		t.Fatalf("deputy-b not ready: %v\n%s", err, b.Logs())
	}

	t.Run("a sync requested at the non-leader runs on the leader", func(t *testing.T) {
		code, body := b.post(t, syncPath("small"), haOperatorToken, `{}`)
		if code != http.StatusAccepted {
			t.Fatalf("POST sync at deputy-b: %d %s", code, body)
		}
		st := waitOperationDone(t, haAppNamespace, "small", 2*time.Minute)
		if st.Phase != v1alpha1.OperationSucceeded {
			t.Fatalf("phase %s: %s", st.Phase, describe(st))
		}
		if st.Identity != "system:serviceaccount:"+haDestNamespace+":"+haDeployer {
			t.Errorf("identity %q, want the project's ServiceAccount", st.Identity)
		}
		if st.Operation.InitiatedBy.Username != "ha-operator" {
			t.Errorf("initiatedBy %+v, want ha-operator", st.Operation.InitiatedBy)
		}
		if !strings.Contains(a.Logs(), `msg="sync operation" user=ha-operator application=ha-apps/small`) {
			t.Errorf("the leader deputy-a wrote no audit line for the operation:\n%s", a.Logs())
		}
		if strings.Contains(b.Logs(), `msg="sync operation"`) {
			t.Errorf("the non-leader deputy-b ran an operation:\n%s", b.Logs())
		}
		for i := range 3 {
			if _, ok := configMapsOf(t)[fmt.Sprintf("small-%d", i)]; !ok {
				t.Errorf("ConfigMap small-%d not created", i)
			}
		}
		if code, body := b.post(t, syncPath("small"), "", `{}`); code != http.StatusUnauthorized {
			t.Errorf("anonymous sync at deputy-b: %d %s", code, body)
		}
	})

	t.Run("killing the leader mid-sync hands over and the operation completes", func(t *testing.T) {
		_, transitionsBefore := leaseHolder(t)
		code, body := b.post(t, syncPath("big"), haOperatorToken, `{"prune":true}`)
		if code != http.StatusAccepted {
			t.Fatalf("POST sync at deputy-b: %d %s", code, body)
		}
		eventually(t, "the leader starts the operation", func() error {
			if st := getApplication(t, haAppNamespace, "big").Status.OperationState; st == nil || st.Phase != v1alpha1.OperationRunning {
				return fmt.Errorf("state %+v", st)
			}
			return nil
		})
		killed := time.Now()
		if err := a.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitLeader(t, "deputy-b")
		t.Logf("deputy-b took the Lease %s after deputy-a was killed (leaseDuration %s)", time.Since(killed).Round(100*time.Millisecond), haLeaseDuration)
		if _, transitions := leaseHolder(t); transitions <= transitionsBefore {
			t.Errorf("lease transitions %d, want more than %d", transitions, transitionsBefore)
		}
		st := waitOperationDone(t, haAppNamespace, "big", 3*time.Minute)
		switch st.Phase {
		case v1alpha1.OperationSucceeded:
			cms := configMapsOf(t)
			for i := range big {
				if _, ok := cms[fmt.Sprintf("big-%03d", i)]; !ok {
					t.Errorf("operation Succeeded but ConfigMap big-%03d is missing", i)
				}
			}
		case v1alpha1.OperationFailed, v1alpha1.OperationError:
			if st.Message == "" {
				t.Errorf("phase %s without a reason", st.Phase)
			}
		default:
			t.Errorf("phase %s", st.Phase)
		}
		if !strings.Contains(b.Logs(), "running an operation again") {
			t.Errorf("deputy-b did not say it ran the interrupted operation again:\n%s", b.Logs())
		}
		// Nothing outside the Applications was touched.
		now, err := admin(t).CoreV1().ConfigMaps(haDestNamespace).Get(t.Context(), "not-managed", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the unmanaged ConfigMap: %v", err)
		}
		if now.ResourceVersion != sentinel.ResourceVersion {
			t.Errorf("the unmanaged ConfigMap was modified (resourceVersion %s -> %s)", sentinel.ResourceVersion, now.ResourceVersion)
		}
		for name, cm := range configMapsOf(t) {
			if name == "not-managed" || name == "kube-root-ca.crt" || strings.HasPrefix(name, "hook-") {
				continue
			}
			if v := cm.Annotations[syncer.TrackingAnnotation]; v != haAppNamespace+"/small" && v != haAppNamespace+"/big" {
				t.Errorf("ConfigMap %s has tracking annotation %q", name, v)
			}
		}
	})

	t.Run("a signed GitHub push syncs the matching automated Application", func(t *testing.T) {
		hook := newGitRepo(t)
		hook.write("hook/cm-1.yaml", configMap("hook-1", "app: hook"))
		first := hook.commit("first")
		repoURL := "file://" + hook.dir
		createApplication(t, haApplication("hook", repoURL, "master", true))
		// Automated: the leader syncs a new Application at once.
		st := waitOperationDone(t, haAppNamespace, "hook", 2*time.Minute)
		if st.Phase != v1alpha1.OperationSucceeded || st.SyncResult == nil || st.SyncResult.Revision != first.String() || !st.Operation.InitiatedBy.Automated {
			t.Fatalf("first automated sync: %s", describe(st))
		}
		hook.write("hook/cm-2.yaml", configMap("hook-2", "app: hook"))
		second := hook.commit("second")

		push := func(ref, secret string) (int, string) {
			t.Helper()
			body := githubPushPayload(ref, second.String(), repoURL)
			client, err := b.Client(false)
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.URL+"/api/webhook", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			mac := hmac.New(sha256.New, []byte(secret))
			mac.Write([]byte(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-GitHub-Event", "push")
			req.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
			req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(out)
		}
		recorded := func() bool { return getApplication(t, haAppNamespace, "hook").Operation != nil }

		if code, body := push("refs/heads/master", "not-the-secret"); code != http.StatusUnauthorized {
			t.Errorf("wrong signature: %d %s, want 401", code, body)
		}
		if recorded() {
			t.Fatal("a push with a wrong signature recorded an operation")
		}
		if code, body := push("refs/heads/feature", haGitHubSecret); code != http.StatusOK || strings.Contains(body, haAppNamespace+"/hook") {
			t.Errorf("push to another branch: %d %s, want 200 triggering nothing", code, body)
		}
		if recorded() {
			t.Fatal("a push to another branch recorded an operation")
		}
		code, body := push("refs/heads/master", haGitHubSecret)
		if code != http.StatusOK || !strings.Contains(body, haAppNamespace+"/hook") {
			t.Fatalf("push to master: %d %s, want 200 triggering ha-apps/hook", code, body)
		}
		st = waitOperationDone(t, haAppNamespace, "hook", 2*time.Minute)
		if st.Phase != v1alpha1.OperationSucceeded || st.SyncResult.Revision != second.String() || st.Operation.InitiatedBy.Username != "git-webhook:github" {
			t.Fatalf("sync after the push: %s (initiatedBy %+v)", describe(st), st.Operation.InitiatedBy)
		}
		if _, ok := configMapsOf(t)["hook-2"]; !ok {
			t.Error("ConfigMap hook-2 of the pushed commit was not created")
		}
	})

	t.Run("SIGTERM releases the Lease", func(t *testing.T) {
		c := env.start(t, "deputy-c")
		if err := c.WaitReady(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := b.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := b.Wait(time.Minute); err != nil && !strings.Contains(err.Error(), "exit status") {
			t.Fatalf("deputy-b did not exit: %v", err)
		}
		if !strings.Contains(b.Logs(), "released the sync Lease") {
			t.Errorf("deputy-b did not release the Lease:\n%s", b.Logs())
		}
		// Released, the Lease names no holder until deputy-c takes it, which
		// it may do at its next retry instead of after leaseDuration.
		if h, _ := leaseHolder(t); h != "" && h != "deputy-c" {
			t.Errorf("after deputy-b stopped the Lease is held by %q", h)
		}
		waitLeader(t, "deputy-c")
	})
}

// githubPushPayload is a push event in GitHub's documented format
// (https://docs.github.com/webhooks/webhook-events-and-payloads#push),
// trimmed to the fields a receiver reads, for repository repoURL.
func githubPushPayload(ref, after, repoURL string) string {
	b, _ := json.Marshal(map[string]any{
		"ref": ref, "before": strings.Repeat("0", 40), "after": after,
		"created": false, "deleted": false, "forced": false, "base_ref": nil,
		"compare": repoURL + "/compare",
		"commits": []any{map[string]any{"id": after, "message": "second", "distinct": true,
			"added": []string{"hook/cm-2.yaml"}, "removed": []string{}, "modified": []string{}}},
		"head_commit": map[string]any{"id": after, "message": "second"},
		"repository": map[string]any{
			"id": 1296269, "name": "hook", "full_name": "e2e/hook", "private": false,
			"html_url": repoURL, "url": repoURL, "clone_url": repoURL, "git_url": repoURL, "ssh_url": repoURL,
			"default_branch": "master", "master_branch": "master",
		},
		"pusher": map[string]any{"name": "e2e", "email": "e2e@example.com"},
		"sender": map[string]any{"login": "e2e", "id": 1},
	})
	return string(b)
}

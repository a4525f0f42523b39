package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/syncer/source"
	"deputy.dev/deputy/test/framework"
)

// The sync engine runs in the test process with the controller identity
// argocd/argocd-application-controller (a ServiceAccount token): every
// request goes through kube-apiserver's impersonation, deputy's gate and
// the cluster's RBAC, exactly as in production.

const inCluster = "https://kubernetes.default.svc"

// gitRepo is a Git repository made by the test with go-git.
type gitRepo struct {
	t   *testing.T
	dir string
	wt  *git.Worktree
}

// newGitRepo creates a repository under repoRoot, the directory the engines
// and replicas under test allow local repositories from.
func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	dir, err := os.MkdirTemp(repoRoot, "repo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	r, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	return &gitRepo{t: t, dir: dir, wt: wt}
}

func (g *gitRepo) write(name, content string) *gitRepo {
	g.t.Helper()
	p := filepath.Join(g.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		g.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		g.t.Fatal(err)
	}
	return g
}

func (g *gitRepo) remove(name string) *gitRepo {
	g.t.Helper()
	if err := os.Remove(filepath.Join(g.dir, filepath.FromSlash(name))); err != nil {
		g.t.Fatal(err)
	}
	return g
}

func (g *gitRepo) commit(msg string) plumbing.Hash {
	g.t.Helper()
	if err := g.wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		g.t.Fatal(err)
	}
	h, err := g.wt.Commit(msg, &git.CommitOptions{Author: &object.Signature{Name: "e2e", Email: "e2e@example.com", When: time.Now()}})
	if err != nil {
		g.t.Fatal(err)
	}
	return h
}

// syncProject applies an argoproj.io AppProject in argocd (what deputy's
// gate reads) and returns the same project for the Request. The preflight's
// SelfSubjectAccessReviews, made as the ServiceAccount, need no whitelist
// entry: deputy's gate allows sync identities to create self reviews.
func syncProject(t *testing.T, name string, spec v1alpha1.AppProjectSpec) *v1alpha1.AppProject {
	t.Helper()
	ensureNamespace(t, "argocd") // so that a test run alone (-run) finds it
	if spec.SourceRepos == nil {
		spec.SourceRepos = []string{"*"}
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	applyArgoProject(t, name, m)
	p := &v1alpha1.AppProject{TypeMeta: metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "AppProject"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: name}, Spec: spec}
	return p
}

func dests(namespaces ...string) []v1alpha1.ApplicationDestination {
	var out []v1alpha1.ApplicationDestination
	for _, ns := range namespaces {
		out = append(out, v1alpha1.ApplicationDestination{Server: inCluster, Namespace: ns})
	}
	return out
}

func saEntry(ns, sa string) v1alpha1.ApplicationDestinationServiceAccount {
	return v1alpha1.ApplicationDestinationServiceAccount{Server: inCluster, Namespace: ns, DefaultServiceAccount: sa}
}

// controllerConfig is the controller identity's client config.
func controllerConfig(t *testing.T) *rest.Config {
	t.Helper()
	ensureNamespace(t, "argocd")
	c := cp.TokenConfig(serviceAccountToken(t, "argocd", "argocd-application-controller"))
	c.QPS, c.Burst = 0, 0 // the engine's default: no client-side limit
	return c
}

// logLines collects the engine's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger(t *testing.T) logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
		t.Log(args)
	}, funcr.Options{})
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

func newSyncEngine(t *testing.T, imp syncer.ImpersonationSettings) (*syncer.Engine, *logLines) {
	t.Helper()
	logs := &logLines{}
	e, err := syncer.NewEngine(syncer.EngineOptions{
		Clusters:      cluster.NewRegistry(cluster.InCluster(controllerConfig(t))),
		Impersonation: imp,
		Source: source.Options{
			CacheDir: t.TempDir(),
			// The tests' repositories are local directories under repoRoot.
			LocalRepositories: []string{repoRoot},
		},
		Logger: logs.logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, logs
}

var enforced = syncer.ImpersonationSettings{Enabled: true, Enforced: true}

func application(name, project, repo, path, ns string, syncOptions ...string) *v1alpha1.Application {
	a := &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: name}, Spec: v1alpha1.ApplicationSpec{
		Project:     project,
		Source:      v1alpha1.ApplicationSource{RepoURL: repo, Path: path},
		Destination: v1alpha1.ApplicationDestination{Server: inCluster, Namespace: ns},
	}}
	if len(syncOptions) > 0 {
		a.Spec.SyncPolicy = &v1alpha1.SyncPolicy{SyncOptions: syncOptions}
	}
	return a
}

// waitForGate waits until deputy's gate lets the controller impersonate sa
// (its informers have seen the project): an impersonated
// SelfSubjectAccessReview, what the preflight sends first.
func waitForGate(t *testing.T, sa string) {
	t.Helper()
	c := rest.CopyConfig(controllerConfig(t))
	c.Impersonate = rest.ImpersonationConfig{UserName: sa}
	cs := kubernetes.NewForConfigOrDie(c)
	eventually(t, "the gate allows impersonating "+sa, func() error {
		_, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps"}},
		}, metav1.CreateOptions{})
		return err
	})
}

func role(t *testing.T, ns, name, saNS, sa string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	cs := admin(t)
	r := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
	if _, err := cs.RbacV1().Roles(ns).Create(t.Context(), r, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		if _, err := cs.RbacV1().Roles(ns).Update(t.Context(), r, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	create(t, cs.RbacV1().RoleBindings(ns).Create, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: saNS, Name: sa}}})
}

func rule(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
}

// grantControllerServiceAccountReads lets the controller identity read
// ServiceAccounts (the preflight's existence check, the one request the
// engine makes as itself).
func grantControllerServiceAccountReads(t *testing.T) {
	cs := admin(t)
	create(t, cs.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-sync-controller-sa-reader"},
		Rules: []rbacv1.PolicyRule{rule("", []string{"serviceaccounts"}, "get")}})
	create(t, cs.RbacV1().ClusterRoleBindings().Create, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-sync-controller-sa-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-sync-controller-sa-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "argocd", Name: "argocd-application-controller"}}})
}

const guestbookManifests = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: guestbook-ui
  labels: {app: guestbook-ui}
spec:
  replicas: 1
  selector:
    matchLabels: {app: guestbook-ui}
  template:
    metadata:
      labels: {app: guestbook-ui}
    spec:
      containers:
      - name: guestbook-ui
        image: gcr.io/heptio-images/ks-guestbook-demo:0.2
        ports:
        - containerPort: 80
`

const guestbookService = `apiVersion: v1
kind: Service
metadata:
  name: guestbook-ui
spec:
  ports:
  - port: 80
    targetPort: 80
  selector:
    app: guestbook-ui
`

func configMap(name string, labels string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  labels: {%s}\ndata:\n  greeting: hello\n", name, labels)
}

func resultsByName(st *v1alpha1.OperationState) map[string]*v1alpha1.ResourceResult {
	out := map[string]*v1alpha1.ResourceResult{}
	if st.SyncResult == nil {
		return out
	}
	for _, r := range st.SyncResult.Resources {
		out[r.Kind+"/"+r.Name] = r
	}
	return out
}

func describe(st *v1alpha1.OperationState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s identity %q: %s\n", st.Phase, st.Identity, st.Message)
	if st.SyncResult != nil {
		for _, r := range st.SyncResult.Resources {
			fmt.Fprintf(&b, "  %s %s/%s %s: %s\n", r.Kind, r.Namespace, r.Name, r.Status, r.Message)
		}
	}
	return b.String()
}

// auditedWrites returns the audited writes since `since` that match keep,
// waiting a little for the log to catch up with want of them.
func auditedWrites(t *testing.T, since time.Time, want int, keep func(framework.AuditEvent) bool) []framework.AuditEvent {
	t.Helper()
	var got []framework.AuditEvent
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, err := framework.ReadAuditLog(auditLog)
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, ev := range events {
			if ev.Stage == "ResponseComplete" && !ev.RequestReceivedTimestamp.Before(since) && keep(ev) {
				got = append(got, ev)
			}
		}
		if len(got) >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestSyncGuestbookAsTheDerivedServiceAccount(t *testing.T) {
	ensureNamespace(t, "guestbook")
	serviceAccountToken(t, "guestbook", "guestbook-deployer")
	grantControllerServiceAccountReads(t)
	rollOutDeployments(t, "guestbook")
	role(t, "guestbook", "e2e-guestbook-deployer", "guestbook", "guestbook-deployer",
		rule("apps", []string{"deployments"}, "get", "list", "watch", "create", "patch", "delete"),
		rule("", []string{"services", "configmaps"}, "get", "list", "create", "patch", "delete"))
	project := syncProject(t, "sync-guestbook", v1alpha1.AppProjectSpec{
		Destinations:               dests("guestbook"),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry("guestbook", "guestbook-deployer")},
	})
	repo := newGitRepo(t)
	repo.write("guestbook/guestbook-ui-deployment.yaml", guestbookManifests)
	repo.write("guestbook/guestbook-ui-svc.yaml", guestbookService)
	repo.write("guestbook/settings.yaml", configMap("guestbook-settings", "app: guestbook-ui"))
	head := repo.commit("guestbook")
	waitForGate(t, deployerSA)

	engine, logs := newSyncEngine(t, enforced)
	started := time.Now()
	var progressed []string
	var mu sync.Mutex
	st := engine.Run(t.Context(), syncer.Request{
		Application: application("guestbook", "sync-guestbook", repo.dir, "guestbook", "guestbook"),
		Project:     project,
		InitiatedBy: v1alpha1.InitiatedBy{Username: "e2e"},
	}, func(s *v1alpha1.OperationState, r *v1alpha1.ResourceResult) {
		mu.Lock()
		defer mu.Unlock()
		if r != nil {
			progressed = append(progressed, r.Kind+"/"+r.Name)
		}
	})
	if st.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("sync: %s", describe(st))
	}
	t.Log(describe(st))
	if st.Identity != deployerSA || !strings.HasSuffix(st.Message, "as "+deployerSA) {
		t.Errorf("identity %q, message %q: want %s", st.Identity, st.Message, deployerSA)
	}
	if st.SyncResult.Revision != head.String() {
		t.Errorf("revision %s, want %s", st.SyncResult.Revision, head)
	}
	res := resultsByName(st)
	for _, name := range []string{"Deployment/guestbook-ui", "Service/guestbook-ui", "ConfigMap/guestbook-settings"} {
		if r := res[name]; r == nil || r.Status != v1alpha1.ResultCodeSynced || r.Message != "created" {
			t.Errorf("%s: %+v", name, r)
		}
	}
	// Each resource is reported when it is applied, and again as its
	// health is known (rollOutDeployments makes the Deployment healthy).
	if seen := slices.Compact(slices.Sorted(slices.Values(progressed))); len(seen) != 3 {
		t.Errorf("progress saw %v, want each of the 3 resources", progressed)
	}
	if r := res["Deployment/guestbook-ui"]; r == nil || r.Health == nil || r.Health.Status != v1alpha1.HealthStatusHealthy {
		t.Errorf("the Deployment's result carries no Healthy health: %+v", r)
	}
	if n := logs.count("is impersonating"); n != 1 {
		t.Errorf("%d log lines say who impersonates whom, want 1 per operation", n)
	}

	t.Run("the objects are in the cluster, tracked, managed by deputy", func(t *testing.T) {
		d, err := admin(t).AppsV1().Deployments("guestbook").Get(t.Context(), "guestbook-ui", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Annotations[syncer.TrackingAnnotation] != "argocd/guestbook" {
			t.Errorf("annotations %v", d.Annotations)
		}
		managers := map[string]bool{}
		for _, m := range d.ManagedFields {
			managers[m.Manager] = true
		}
		if !managers[syncer.FieldManager] {
			t.Errorf("field managers %v lack %q", managers, syncer.FieldManager)
		}
	})

	t.Run("the audit log shows every write made by the controller impersonating the ServiceAccount", func(t *testing.T) {
		events := auditedWrites(t, started, 3, func(ev framework.AuditEvent) bool {
			// (the status rollOutDeployments writes, as the admin, is not
			// the engine's)
			return ev.ObjectRef != nil && ev.ObjectRef.Namespace == "guestbook" && strings.HasPrefix(ev.ObjectRef.Name, "guestbook-") &&
				ev.ObjectRef.Subresource != "status"
		})
		patched := map[string]bool{}
		for _, ev := range events {
			if ev.User.Username != controllerSA || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != deployerSA {
				imp := "<none>"
				if ev.ImpersonatedUser != nil {
					imp = ev.ImpersonatedUser.Username
				}
				t.Errorf("%s %s/%s by %s impersonating %s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name, ev.User.Username, imp)
				continue
			}
			// The engine sends the username only; kube-apiserver adds a
			// ServiceAccount's groups, and nothing else may appear.
			for _, g := range ev.ImpersonatedUser.Groups {
				if g != "system:serviceaccounts" && g != "system:serviceaccounts:guestbook" && g != "system:authenticated" {
					t.Errorf("impersonated group %q: a ServiceAccount is impersonated by name only", g)
				}
			}
			if ev.Verb == "patch" && ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300 {
				patched[ev.ObjectRef.Resource+"/"+ev.ObjectRef.Name] = true
			}
		}
		for _, want := range []string{"deployments/guestbook-ui", "services/guestbook-ui", "configmaps/guestbook-settings"} {
			if !patched[want] {
				t.Errorf("no audited server-side apply (patch) of %s; writes: %+v", want, events)
			}
		}
		// Nothing else the controller wrote during the sync went
		// unimpersonated (its SelfSubjectReview naming itself aside).
		for _, ev := range auditedWrites(t, started, 0, func(ev framework.AuditEvent) bool { return ev.User.Username == controllerSA }) {
			if ev.ImpersonatedUser == nil && ev.ObjectRef != nil && ev.ObjectRef.Resource != "selfsubjectreviews" && ev.ObjectRef.Resource != "serviceaccounts" {
				t.Errorf("the controller wrote %s %+v as itself", ev.Verb, ev.ObjectRef)
			}
		}
	})

	t.Run("a second sync sends nothing for what is unchanged, and repairs what someone else changed", func(t *testing.T) {
		cms := admin(t).CoreV1().ConfigMaps("guestbook")
		cm, err := cms.Get(t.Context(), "guestbook-settings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["greeting"] = "edited by hand"
		if _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
		again := engine.Run(t.Context(), syncer.Request{Application: application("guestbook", "sync-guestbook", repo.dir, "guestbook", "guestbook"), Project: project}, nil)
		if again.Phase != v1alpha1.OperationSucceeded {
			t.Fatal(describe(again))
		}
		res := resultsByName(again)
		for _, name := range []string{"Deployment/guestbook-ui", "Service/guestbook-ui"} {
			if r := res[name]; r.Message != "unchanged" {
				t.Errorf("%s: %+v", name, r)
			}
		}
		if r := res["ConfigMap/guestbook-settings"]; r.Message != "configured" {
			t.Errorf("the edited ConfigMap: %+v", r)
		}
		if cm, err := cms.Get(t.Context(), "guestbook-settings", metav1.GetOptions{}); err != nil || cm.Data["greeting"] != "hello" {
			t.Errorf("the hand edit survived the sync: %v %v", cm.Data, err)
		}
	})
}

func TestSyncPreflightNamesTheMissingPermission(t *testing.T) {
	const ns, sa = "sync-limited", "limited-deployer"
	saUser := "system:serviceaccount:" + ns + ":" + sa
	ensureNamespace(t, ns)
	serviceAccountToken(t, ns, sa)
	grantControllerServiceAccountReads(t)
	rollOutDeployments(t, ns)
	// Everything the sync needs but "create services" (get: to see who
	// tracks an object before writing it; watch: to wait until the
	// Deployment is healthy).
	role(t, ns, "e2e-limited", ns, sa,
		rule("apps", []string{"deployments"}, "get", "watch", "create", "patch"),
		rule("", []string{"configmaps"}, "get", "create", "patch"),
		rule("", []string{"services"}, "get", "patch"))
	project := syncProject(t, "sync-limited", v1alpha1.AppProjectSpec{
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, sa)},
	})
	repo := newGitRepo(t)
	repo.write("app/deploy.yaml", guestbookManifests).write("app/svc.yaml", guestbookService).write("app/cm.yaml", configMap("limited-settings", "a: b"))
	repo.commit("app")
	waitForGate(t, saUser)
	engine, _ := newSyncEngine(t, enforced)
	app := application("limited", "sync-limited", repo.dir, "app", ns)

	st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
	t.Log(st.Message)
	if st.Phase != v1alpha1.OperationError {
		t.Fatalf("want Error: %s", describe(st))
	}
	for _, want := range []string{
		"preflight failed: " + saUser + " lacks 1 permission this sync needs; nothing was changed",
		"  - create services in namespace " + ns + ", for Service " + ns + "/guestbook-ui\n",
		// The Role holds everything the sync needs, not only what is
		// missing: applying it (it replaces an earlier suggestion) converges.
		"kind: Role\nmetadata:\n  name: deputy-sync-limited\n  namespace: " + ns + "\nrules:\n" +
			"- apiGroups:\n  - \"\"\n  resources:\n  - configmaps\n  - services\n  verbs:\n  - get\n  - list\n  - create\n  - patch\n" +
			"- apiGroups:\n  - apps\n  resources:\n  - deployments\n  verbs:\n  - get\n  - list\n  - watch\n  - create\n  - patch\n",
	} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("message lacks %q", want)
		}
	}
	if report, _, _ := strings.Cut(st.Message, "These RBAC objects"); strings.Count(report, "\n  - ") != 1 {
		t.Errorf("the report must name exactly one permission:\n%s", st.Message)
	}
	t.Run("nothing was created", func(t *testing.T) {
		cs := admin(t)
		if _, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "guestbook-ui", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("deployment: %v", err)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "limited-settings", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("configmap: %v", err)
		}
		if _, err := cs.CoreV1().Services(ns).Get(t.Context(), "guestbook-ui", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("service: %v", err)
		}
	})
	t.Run("after applying the printed RBAC the sync succeeds", func(t *testing.T) {
		_, yamlPart, ok := strings.Cut(st.Message, "(kubectl apply -f -):\n")
		if !ok {
			t.Fatal("no RBAC in the message")
		}
		if out, errOut, err := cp.Kubectl(t.Context(), []byte(yamlPart), "apply", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply: %v\n%s%s", err, out, errOut)
		}
		eventually(t, "the sync succeeds once RBAC is granted", func() error {
			st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
			if st.Phase != v1alpha1.OperationSucceeded {
				return fmt.Errorf("%s", describe(st))
			}
			return nil
		})
	})
	t.Run("a ServiceAccount that does not exist is named", func(t *testing.T) {
		p := syncProject(t, "sync-limited", v1alpha1.AppProjectSpec{
			Destinations:               dests(ns),
			DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, "nobody")},
		})
		waitForGate(t, "system:serviceaccount:"+ns+":nobody")
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: p}, nil)
		if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "ServiceAccount "+ns+"/nobody, which AppProject \"sync-limited\" derives for this destination, does not exist") {
			t.Errorf("%s", describe(st))
		}
	})
}

func TestSyncEnforcement(t *testing.T) {
	const ns = "sync-nomatch"
	ensureNamespace(t, ns)
	project := syncProject(t, "sync-nomatch", v1alpha1.AppProjectSpec{
		Destinations: dests(ns),
		// An entry for another namespace only.
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry("guestbook", "guestbook-deployer")},
	})
	repo := newGitRepo(t)
	repo.write("app/cm.yaml", configMap("nomatch", "a: b"))
	repo.commit("app")
	app := application("nomatch", "sync-nomatch", repo.dir, "app", ns)

	t.Run("enforced: Error with upstream's message, nothing applied", func(t *testing.T) {
		engine, _ := newSyncEngine(t, enforced)
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
		if st.Phase != v1alpha1.OperationError || st.Message != "no matching service account found for destination server https://kubernetes.default.svc and namespace "+ns {
			t.Fatalf("%s", describe(st))
		}
		if _, err := admin(t).CoreV1().ConfigMaps(ns).Get(t.Context(), "nomatch", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("configmap: %v", err)
		}
	})
	t.Run("not enforced: syncs as the controller identity and says so", func(t *testing.T) {
		// The controller identity needs RBAC of its own in this case.
		role(t, ns, "e2e-controller-own", "argocd", "argocd-application-controller", rule("", []string{"configmaps"}, "get", "create", "patch"))
		engine, _ := newSyncEngine(t, syncer.ImpersonationSettings{Enabled: true, Enforced: false})
		started := time.Now()
		var st *v1alpha1.OperationState
		eventually(t, "the sync as the controller identity succeeds", func() error {
			st = engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
			if st.Phase != v1alpha1.OperationSucceeded {
				return fmt.Errorf("%s", describe(st))
			}
			return nil
		})
		if st.Identity != syncer.ControllerIdentity || !strings.Contains(st.Message, "as the controller identity (impersonation not enforced)") {
			t.Errorf("%s", describe(st))
		}
		for _, ev := range auditedWrites(t, started, 1, func(ev framework.AuditEvent) bool {
			return ev.ObjectRef != nil && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == "nomatch"
		}) {
			if ev.User.Username != controllerSA || ev.ImpersonatedUser != nil {
				t.Errorf("%s by %s impersonating %v, want the controller itself", ev.Verb, ev.User.Username, ev.ImpersonatedUser)
			}
		}
	})
}

func TestSyncPruneDeletesOnlyWhatItTracks(t *testing.T) {
	const ns, sa = "sync-prune", "prune-deployer"
	saUser := "system:serviceaccount:" + ns + ":" + sa
	ensureNamespace(t, ns)
	serviceAccountToken(t, ns, sa)
	grantControllerServiceAccountReads(t)
	role(t, ns, "e2e-prune", ns, sa, rule("", []string{"configmaps"}, "get", "list", "create", "patch", "delete"))
	project := syncProject(t, "sync-prune", v1alpha1.AppProjectSpec{
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, sa)},
	})
	repo := newGitRepo(t)
	repo.write("app/keep.yaml", configMap("keep", "app: prune-demo"))
	repo.write("app/remove.yaml", configMap("remove", "app: prune-demo"))
	repo.commit("two")
	waitForGate(t, saUser)
	engine, _ := newSyncEngine(t, enforced)
	app := application("prune-demo", "sync-prune", repo.dir, "app", ns)

	first := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
	if first.Phase != v1alpha1.OperationSucceeded {
		t.Fatal(describe(first))
	}
	cs := admin(t)
	// Same labels, no tracking annotation; and another Application's object.
	create(t, cs.CoreV1().ConfigMaps(ns).Create, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bystander", Labels: map[string]string{"app": "prune-demo"}}})
	create(t, cs.CoreV1().ConfigMaps(ns).Create, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-app", Labels: map[string]string{"app": "prune-demo"},
		Annotations: map[string]string{syncer.TrackingAnnotation: "argocd/another-app"}}})
	repo.remove("app/remove.yaml")
	repo.commit("remove one")
	app.Status.OperationState = first

	t.Run("a dry run reports what it would prune and deletes nothing", func(t *testing.T) {
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Prune: true, DryRun: true}}, nil)
		if r := resultsByName(st)["ConfigMap/remove"]; st.Phase != v1alpha1.OperationSucceeded || r == nil || r.Status != v1alpha1.ResultCodePruneSkipped || r.Message != "would be pruned (dry run)" {
			t.Fatalf("%s", describe(st))
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "remove", metav1.GetOptions{}); err != nil {
			t.Errorf("dry run deleted: %v", err)
		}
	})
	t.Run("without prune nothing is deleted, what prune would delete is reported, and the Application is OutOfSync", func(t *testing.T) {
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
		res := resultsByName(st)
		if r := res["ConfigMap/remove"]; st.Phase != v1alpha1.OperationSucceeded || len(res) != 2 || r == nil ||
			r.Status != v1alpha1.ResultCodePruneSkipped || r.Message != "would be pruned (prune is off)" {
			t.Fatalf("%s", describe(st))
		}
		if sync, ok := v1alpha1.SyncStatusAfter(st); !ok || sync.Status != v1alpha1.SyncStatusCodeOutOfSync {
			t.Errorf("sync status after it: %+v (%v), want OutOfSync", sync, ok)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "remove", metav1.GetOptions{}); err != nil {
			t.Errorf("a sync without prune deleted: %v", err)
		}
	})
	t.Run("with prune the removed file's object is deleted, and only it", func(t *testing.T) {
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Prune: true}}, nil)
		t.Log(describe(st))
		res := resultsByName(st)
		if st.Phase != v1alpha1.OperationSucceeded || res["ConfigMap/remove"] == nil || res["ConfigMap/remove"].Status != v1alpha1.ResultCodePruned || len(res) != 2 {
			t.Fatalf("%s", describe(st))
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "remove", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("remove: %v", err)
		}
		for _, survivor := range []string{"keep", "bystander", "other-app"} {
			if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), survivor, metav1.GetOptions{}); err != nil {
				t.Errorf("%s: %v", survivor, err)
			}
		}
		app.Status.OperationState = st
	})
	t.Run("deleting the Application's resources deletes every tracked object as the ServiceAccount", func(t *testing.T) {
		started := time.Now()
		st := engine.DeleteResources(t.Context(), app, project, syncer.DeleteOptions{})
		if st.Phase != v1alpha1.OperationSucceeded || st.Identity != saUser {
			t.Fatalf("%s", describe(st))
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "keep", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("keep: %v", err)
		}
		for _, survivor := range []string{"bystander", "other-app"} {
			if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), survivor, metav1.GetOptions{}); err != nil {
				t.Errorf("%s: %v", survivor, err)
			}
		}
		for _, ev := range auditedWrites(t, started, 1, func(ev framework.AuditEvent) bool {
			return ev.Verb == "delete" && ev.ObjectRef != nil && ev.ObjectRef.Namespace == ns
		}) {
			if ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != saUser {
				t.Errorf("delete of %s not as the ServiceAccount: %+v", ev.ObjectRef.Name, ev)
			}
		}
	})
}

func TestSyncCreateNamespace(t *testing.T) {
	const ns, saNS, sa = "sync-newns", "sync-admin", "ns-deployer"
	saUser := "system:serviceaccount:" + saNS + ":" + sa
	ensureNamespace(t, saNS)
	serviceAccountToken(t, saNS, sa)
	grantControllerServiceAccountReads(t)
	project := syncProject(t, "sync-newns", v1alpha1.AppProjectSpec{
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, saNS+":"+sa)},
		// deputy's gate lets the ServiceAccount create a Namespace only
		// when the project whitelists the kind.
		ClusterResourceWhitelist: []v1alpha1.ClusterResourceRestrictionItem{{Group: "", Kind: "Namespace"}},
	})
	repo := newGitRepo(t)
	repo.write("app/cm.yaml", configMap("in-new-namespace", "a: b"))
	repo.commit("app")
	waitForGate(t, saUser)
	engine, _ := newSyncEngine(t, enforced)
	app := application("newns", "sync-newns", repo.dir, "app", ns, "CreateNamespace=true")
	cs := admin(t)

	t.Run("without RBAC to create namespaces the preflight says so", func(t *testing.T) {
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
		if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "create namespaces (cluster-scoped), for Namespace "+ns+" (syncOptions CreateNamespace=true)") ||
			!strings.Contains(st.Message, "kind: ClusterRole") {
			t.Fatalf("%s", describe(st))
		}
		if _, err := cs.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace: %v", err)
		}
	})
	t.Run("with it the namespace is created as the ServiceAccount", func(t *testing.T) {
		create(t, cs.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-ns-deployer"},
			Rules: []rbacv1.PolicyRule{rule("", []string{"namespaces"}, "create"), rule("", []string{"configmaps"}, "get", "create", "patch")}})
		create(t, cs.RbacV1().ClusterRoleBindings().Create, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-ns-deployer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-ns-deployer"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: saNS, Name: sa}}})
		started := time.Now()
		var st *v1alpha1.OperationState
		eventually(t, "the sync succeeds", func() error {
			st = engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
			if st.Phase != v1alpha1.OperationSucceeded {
				return fmt.Errorf("%s", describe(st))
			}
			return nil
		})
		if r := resultsByName(st)["Namespace/"+ns]; r == nil || r.Message != "created (syncOptions CreateNamespace=true)" {
			t.Errorf("%s", describe(st))
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "in-new-namespace", metav1.GetOptions{}); err != nil {
			t.Errorf("configmap: %v", err)
		}
		evs := auditedWrites(t, started, 1, func(ev framework.AuditEvent) bool {
			return ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "namespaces" && ev.ObjectRef.Name == ns && ev.ResponseStatus != nil && ev.ResponseStatus.Code == 201
		})
		if len(evs) != 1 || evs[0].User.Username != controllerSA || evs[0].ImpersonatedUser == nil || evs[0].ImpersonatedUser.Username != saUser {
			t.Errorf("namespace creation audited as %+v", evs)
		}
	})
}

func TestSyncAnRBACEscalationFailsOnlyThatResource(t *testing.T) {
	const ns, sa = "sync-escalate", "esc-deployer"
	saUser := "system:serviceaccount:" + ns + ":" + sa
	ensureNamespace(t, ns)
	serviceAccountToken(t, ns, sa)
	grantControllerServiceAccountReads(t)
	// The ServiceAccount may write Roles and ConfigMaps, but holds no
	// Secret permissions, so it may not grant them.
	role(t, ns, "e2e-esc", ns, sa,
		rule("", []string{"configmaps"}, "get", "create", "patch"),
		rule("rbac.authorization.k8s.io", []string{"roles"}, "get", "create", "patch"))
	project := syncProject(t, "sync-escalate", v1alpha1.AppProjectSpec{
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, sa)},
	})
	repo := newGitRepo(t)
	repo.write("app/cm.yaml", configMap("esc-settings", "a: b"))
	repo.write("app/role.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: secret-reader\nrules:\n- apiGroups: [\"\"]\n  resources: [secrets]\n  verbs: [get]\n")
	repo.commit("app")
	waitForGate(t, saUser)
	engine, _ := newSyncEngine(t, enforced)

	st := engine.Run(t.Context(), syncer.Request{Application: application("escalate", "sync-escalate", repo.dir, "app", ns), Project: project}, nil)
	t.Log(describe(st))
	res := resultsByName(st)
	if st.Phase != v1alpha1.OperationFailed {
		t.Errorf("phase %s, want Failed", st.Phase)
	}
	if r := res["Role/secret-reader"]; r == nil || r.Status != v1alpha1.ResultCodeSyncFailed || !strings.Contains(r.Message, "is attempting to grant RBAC permissions not currently held") {
		t.Errorf("role: %+v", r)
	}
	if r := res["ConfigMap/esc-settings"]; r == nil || r.Status != v1alpha1.ResultCodeSynced {
		t.Errorf("configmap: %+v", r)
	}
	if _, err := admin(t).CoreV1().ConfigMaps(ns).Get(t.Context(), "esc-settings", metav1.GetOptions{}); err != nil {
		t.Errorf("configmap: %v", err)
	}
	t.Run("deputy keeps serving", func(t *testing.T) {
		c, err := deputy.Client(false)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(deputy.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz: %d %s", resp.StatusCode, body.String())
		}
	})
}

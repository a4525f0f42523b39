package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/syncer/health"
	"deputy.dev/deputy/test/framework"
)

// Helpers of the issue-15 tests (sync waves, health, hooks, retries;
// /work/notes/issue15-spec.md): manifests, the status a controller would
// write, an engine run the test watches while it runs, and a cluster-mode
// replica with its own Applications.
//
// The e2e cluster is kube-apiserver and etcd only: no kube-controller-manager,
// no scheduler, no kubelet. Nothing ever writes a Deployment's or a Job's
// status, so a Deployment stays Progressing and a Job Running for ever unless
// the test writes, as the admin through the status subresource, what the
// deployment or job controller would write once the Pods ran.

// deploymentYAML is a one-replica Deployment with the given annotations
// (a YAML flow mapping's entries, e.g. `argocd.argoproj.io/sync-wave: "1"`).
func deploymentYAML(name, annotations string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
  annotations: {%[2]s}
spec:
  replicas: 1
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
`, name, annotations)
}

// jobYAML is a Job that would run one Pod once, with the given annotations.
func jobYAML(name, annotations string) string {
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: %[1]s
  annotations: {%[2]s}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: job
        image: registry.k8s.io/busybox:1.36
        command: [sh, -c, "echo %[1]s"]
`, name, annotations)
}

// annotatedConfigMap is a ConfigMap with the given annotations.
func annotatedConfigMap(name, annotations string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  annotations: {%s}\ndata:\n  greeting: hello\n", name, annotations)
}

// updateDeploymentStatus reads a Deployment, changes it with mutate and
// writes it back through the status subresource as the admin, retrying on
// conflicts.
func updateDeploymentStatus(t *testing.T, ns, name string, mutate func(*appsv1.Deployment)) {
	t.Helper()
	cs := admin(t)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := cs.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(d)
		_, err = cs.AppsV1().Deployments(ns).UpdateStatus(t.Context(), d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("status of Deployment %s/%s: %v", ns, name, err)
	}
}

// markDeploymentProgressing writes what the deployment controller writes
// right after it created the new ReplicaSet: the current generation
// observed, one replica updated but not ready, Progressing=True
// (ReplicaSetUpdated), Available=False. deputy's health package must call
// it Progressing (checked: the test relies on it).
func markDeploymentProgressing(t *testing.T, ns, name string) {
	t.Helper()
	updateDeploymentStatus(t, ns, name, func(d *appsv1.Deployment) {
		now := metav1.Now()
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, UnavailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable",
					Message: "Deployment does not have minimum availability.", LastUpdateTime: now, LastTransitionTime: now},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated",
					Message: fmt.Sprintf("ReplicaSet %q is progressing.", name+"-5d4f8c7b9"), LastUpdateTime: now, LastTransitionTime: now},
			},
		}
	})
	wantHealth(t, "apps", "v1", "deployments", ns, name, v1alpha1.HealthStatusProgressing)
}

// markDeploymentAvailable writes what the deployment controller writes once
// the Deployment's Pods are ready (rolledOutStatus).
func markDeploymentAvailable(t *testing.T, ns, name string) {
	t.Helper()
	updateDeploymentStatus(t, ns, name, func(d *appsv1.Deployment) { d.Status = rolledOutStatus(d) })
	wantHealth(t, "apps", "v1", "deployments", ns, name, v1alpha1.HealthStatusHealthy)
}

// finishJob writes what the job controller writes when the Job's Pod
// succeeded (complete) or failed with backoffLimit 0: kube-apiserver's Job
// status validation wants startTime, and SuccessCriteriaMet before Complete
// (with completionTime) or FailureTarget before Failed.
func finishJob(t *testing.T, ns, name string, complete bool) {
	t.Helper()
	cs := admin(t)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		j, err := cs.BatchV1().Jobs(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		start := metav1.NewTime(now.Add(-time.Second))
		j.Status.StartTime = &start
		cond := func(typ batchv1.JobConditionType, reason, msg string) batchv1.JobCondition {
			return batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastProbeTime: now, LastTransitionTime: now}
		}
		if complete {
			j.Status.Succeeded = 1
			j.Status.CompletionTime = &now
			j.Status.Conditions = []batchv1.JobCondition{
				cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached", "Reached expected number of succeeded pods"),
				cond(batchv1.JobComplete, "CompletionsReached", "Reached expected number of succeeded pods"),
			}
		} else {
			j.Status.Failed = 1
			j.Status.Conditions = []batchv1.JobCondition{
				cond(batchv1.JobFailureTarget, "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
				cond(batchv1.JobFailed, "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
			}
		}
		_, err = cs.BatchV1().Jobs(ns).UpdateStatus(t.Context(), j, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("status of Job %s/%s: %v", ns, name, err)
	}
	live := getUnstructured(t, "batch", "v1", "jobs", ns, name)
	want := v1alpha1.HookPhaseFailed
	if complete {
		want = v1alpha1.HookPhaseSucceeded
	}
	if phase, msg := health.HookPhase(live); phase != want {
		t.Fatalf("the status written to Job %s/%s reads as hook phase %s (%s), want %s: the test's status is wrong", ns, name, phase, msg, want)
	}
}

func getUnstructured(t *testing.T, group, version, resource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := dynamicResource(group, version, resource).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", resource, ns, name, err)
	}
	return u
}

// wantHealth checks that deputy's health package reads the live object as
// want: the status the test wrote is what a controller's would mean.
func wantHealth(t *testing.T, group, version, resource, ns, name, want string) {
	t.Helper()
	if h := health.Assess(getUnstructured(t, group, version, resource, ns, name)); h.Status != want {
		t.Fatalf("the status written to %s %s/%s reads as %s (%s), want %s: the test's status is wrong", resource, ns, name, h.Status, h.Message, want)
	}
}

// absent is nil when get reports NotFound.
func absent(what string, get func() error) error {
	switch err := get(); {
	case err == nil:
		return fmt.Errorf("%s exists", what)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %v", what, err)
	}
	return nil
}

// --- an engine run in the test process ---------------------------------------

// runningSync is an engine operation running in a goroutine while the test
// looks at the cluster and writes status; it records every progress event.
type runningSync struct {
	done   chan struct{}
	final  *v1alpha1.OperationState
	mu     sync.Mutex
	events []v1alpha1.ResourceResult
}

// startSync runs engine.Run in the background; the test's end cancels it
// and waits for it.
func startSync(t *testing.T, engine *syncer.Engine, req syncer.Request) *runningSync {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningSync{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.final = engine.Run(ctx, req, func(_ *v1alpha1.OperationState, res *v1alpha1.ResourceResult) {
			if res == nil {
				return
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.events = append(r.events, *res.DeepCopy())
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func (r *runningSync) running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// wait returns the final state, failing the test after timeout.
func (r *runningSync) wait(t *testing.T, timeout time.Duration) *v1alpha1.OperationState {
	t.Helper()
	select {
	case <-r.done:
		return r.final
	case <-time.After(timeout):
		t.Fatalf("the operation did not end within %s; progress so far:\n%s", timeout, r.describe())
		return nil
	}
}

// last is the latest progress event of kind/name, nil before the first.
func (r *runningSync) last(kind, name string) *v1alpha1.ResourceResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Kind == kind && r.events[i].Name == name {
			e := r.events[i]
			return &e
		}
	}
	return nil
}

func (r *runningSync) describe() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		fmt.Fprintf(&b, "  %s\n", describeResult(&e))
	}
	return b.String()
}

func describeResult(r *v1alpha1.ResourceResult) string {
	h := ""
	if r.Health != nil {
		h = r.Health.Status
		if r.Health.Message != "" {
			h += " (" + r.Health.Message + ")"
		}
	}
	return fmt.Sprintf("%s %s/%s %s: %s [phase %s wave %d hook %s/%s health %s]", r.Kind, r.Namespace, r.Name, r.Status, r.Message,
		r.SyncPhase, r.SyncWave, r.HookType, r.HookPhase, h)
}

// describeAll is describe with every result's phase, wave, hook and health.
func describeAll(st *v1alpha1.OperationState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s identity %q: %s\n", st.Phase, st.Identity, st.Message)
	if st.SyncResult != nil {
		for _, r := range st.SyncResult.Resources {
			fmt.Fprintf(&b, "  %s\n", describeResult(r))
		}
	}
	return b.String()
}

// wantHealthCode checks a result's health.
func wantHealthCode(r *v1alpha1.ResourceResult, code string) error {
	switch {
	case r == nil:
		return fmt.Errorf("no result")
	case r.Health == nil:
		return fmt.Errorf("no health in %s", describeResult(r))
	case r.Health.Status != code:
		return fmt.Errorf("health %s, want %s: %s", r.Health.Status, code, describeResult(r))
	}
	return nil
}

// engineTenant prepares namespace ns for an in-process engine test: the
// ServiceAccount ns/deployer, which may manage Deployments, Jobs and
// ConfigMaps there (watch included: the engine watches what it waits for,
// as the ServiceAccount; rules replace these), and an argoproj.io AppProject of the same name
// deriving it; it waits until deputy's gate lets the controller identity
// impersonate it and returns the project and the ServiceAccount's username.
func engineTenant(t *testing.T, ns string, rules ...rbacv1.PolicyRule) (*v1alpha1.AppProject, string) {
	t.Helper()
	saUser := "system:serviceaccount:" + ns + ":deployer"
	ensureNamespace(t, ns)
	serviceAccountToken(t, ns, "deployer")
	grantControllerServiceAccountReads(t)
	if len(rules) == 0 {
		verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
		rules = []rbacv1.PolicyRule{
			rule("apps", []string{"deployments"}, verbs...),
			rule("batch", []string{"jobs"}, verbs...),
			rule("", []string{"configmaps"}, verbs...),
		}
	}
	role(t, ns, "e2e-waves-deployer", ns, "deployer", rules...)
	project := syncProject(t, ns, v1alpha1.AppProjectSpec{
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, "deployer")},
	})
	waitForGate(t, saUser)
	return project, saUser
}

// auditedAs checks that every audited write matching keep was made by the
// controller identity impersonating saUser, and that there was at least one.
func auditedAs(t *testing.T, since time.Time, saUser, what string, keep func(framework.AuditEvent) bool) []framework.AuditEvent {
	t.Helper()
	evs := auditedWrites(t, since, 1, keep)
	if len(evs) == 0 {
		t.Errorf("no audited write of %s since %s", what, since.Format(time.RFC3339Nano))
	}
	for _, ev := range evs {
		if ev.User.Username != controllerSA || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != saUser {
			t.Errorf("%s of %s by %s impersonating %+v, want %s impersonating %s", ev.Verb, what, ev.User.Username, ev.ImpersonatedUser, controllerSA, saUser)
		}
	}
	return evs
}

// isWrite matches audited successful writes (create, or an apply or update
// that created or changed it) of one object.
func isWrite(resource, ns, name string, verbs ...string) func(framework.AuditEvent) bool {
	return func(ev framework.AuditEvent) bool {
		if ev.ObjectRef == nil || ev.ObjectRef.Resource != resource || ev.ObjectRef.Namespace != ns || ev.ObjectRef.Name != name ||
			ev.ObjectRef.Subresource != "" || ev.ResponseStatus == nil || ev.ResponseStatus.Code >= 300 {
			return false
		}
		for _, v := range verbs {
			if ev.Verb == v {
				return true
			}
		}
		return false
	}
}

// --- a cluster-mode replica with its own Applications --------------------------

// The cluster-mode tests of issue 15 run Applications in wavesAppNS, synced
// by a replica of deputy (deputy-system/deputy with manifests/base's RBAC,
// impersonation enabled) into wavesDestNS as wavesSA, which the deputy.dev
// AppProject wavesProject in deputy-system derives. wavesOperatorToken is a
// user of the replica's own policy who may sync and read Applications there
// (for `deputy sync`).
const (
	wavesAppNS         = "waves-apps"
	wavesDestNS        = "waves-dest"
	wavesSA            = "waves-deployer"
	wavesProject       = "waves"
	wavesOperatorToken = "e2e-waves-operator-token-3f9d27"
)

var wavesSAUser = "system:serviceaccount:" + wavesDestNS + ":" + wavesSA

type wavesEnv struct{ *replicaEnv }

var wavesReplicas int

// setupWaves creates what the cluster-mode tests share (idempotent): the
// namespaces, deputy's identity and RBAC, the destination's ServiceAccount
// with a Role for Deployments, Jobs and ConfigMaps (not Secrets: the retry
// test grants those), the AppProject, and the replica's policy.
func setupWaves(t *testing.T) *wavesEnv {
	t.Helper()
	for _, ns := range []string{deputyNamespace, wavesAppNS, wavesDestNS} {
		ensureNamespace(t, ns)
	}
	env := &wavesEnv{replicaEnv: newReplicaEnv(t)}
	serviceAccountToken(t, wavesDestNS, wavesSA)
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	role(t, wavesDestNS, wavesSA, wavesDestNS, wavesSA,
		rule("apps", []string{"deployments"}, verbs...),
		rule("batch", []string{"jobs"}, verbs...),
		rule("", []string{"configmaps"}, verbs...))
	createDeputyAppProject(t, wavesProject, wavesAppNS, wavesDestNS, wavesSA)
	env.writePolicy(t, "waves-operator", wavesOperatorToken, wavesAppNS)
	// The main deputy's gate must have seen the project before a sync can
	// impersonate wavesSA (as deputy-system/deputy).
	c := cp.TokenConfig(serviceAccountToken(t, deputyNamespace, "deputy"))
	eventually(t, "the gate lets deputy-system/deputy act as "+wavesSAUser, func() error {
		_, err := impersonating(c, wavesSAUser).CoreV1().ConfigMaps(wavesDestNS).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err
	})
	return env
}

// start starts a replica running the Application controller for
// wavesAppNS (stopped when the test ends) and waits until it leads.
func (e *wavesEnv) start(t *testing.T) *framework.Deputy {
	t.Helper()
	return e.startWith(t, "")
}

// startWith is start with extra lines of the configuration's sync section
// (indented by two spaces, ending in a newline).
func (e *wavesEnv) startWith(t *testing.T, extraSync string) *framework.Deputy {
	t.Helper()
	wavesReplicas++
	identity := fmt.Sprintf("waves-%d", wavesReplicas)
	cfg := fmt.Sprintf(`apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
sync:
  impersonation: {enabled: true}
  cacheDir: %s
  localRepositories: [%s]
  applicationNamespaces: [%s]
  leaderElection:
    leaseNamespace: %s
    leaseName: %s
    identity: %s
    leaseDuration: 4s
    renewDeadline: 3s
    retryPeriod: 500ms
%s`, filepath.Join(e.dir, "cache-"+identity), repoRoot, wavesAppNS, deputyNamespace, haLease, identity, extraSync)
	cfgFile := filepath.Join(e.dir, identity+".yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, err := framework.DeputyBinary()
	if err != nil {
		t.Fatal(err)
	}
	d, err := framework.StartDeputy(framework.DeputyOptions{Bin: bin, CertDir: deputy.CertDir,
		Args: []string{"--config", cfgFile, "--kubeconfig", e.kubeconfig, "--policy", e.policyDir},
		Env:  []string{"POD_NAMESPACE=" + deputyNamespace}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Stop()
		if t.Failed() {
			t.Logf("replica %s log (tail):\n%s", identity, tail(d.Logs(), 80))
		}
	})
	waitLeader(t, identity)
	return d
}

// wavesApplication is an Application of wavesProject in wavesAppNS,
// syncing path of repo into wavesDestNS.
func wavesApplication(name, repo, path string) *v1alpha1.Application {
	return &v1alpha1.Application{
		ObjectMeta: metav1.ObjectMeta{Namespace: wavesAppNS, Name: name},
		Spec: v1alpha1.ApplicationSpec{
			Project:     wavesProject,
			Source:      v1alpha1.ApplicationSource{RepoURL: repo, Path: path},
			Destination: v1alpha1.ApplicationDestination{Server: inCluster, Namespace: wavesDestNS},
		},
	}
}

// createWavesApplication creates app; the test's end deletes it and the
// objects it tracks.
func createWavesApplication(t *testing.T, app *v1alpha1.Application) {
	t.Helper()
	createApplication(t, app)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = applicationsClient().Namespace(app.Namespace).Delete(ctx, app.Name, metav1.DeleteOptions{})
		deleteTracked(ctx, wavesDestNS, app.Namespace+"/"+app.Name)
		cs := admin(t)
		tracked := func(m metav1.Object) bool {
			return m.GetAnnotations()[syncer.TrackingAnnotation] == app.Namespace+"/"+app.Name
		}
		if l, err := cs.AppsV1().Deployments(wavesDestNS).List(ctx, metav1.ListOptions{}); err == nil {
			for i := range l.Items {
				if tracked(&l.Items[i]) {
					_ = cs.AppsV1().Deployments(wavesDestNS).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{})
				}
			}
		}
	})
}

// applicationOf converts an unstructured Application.
func applicationOf(t *testing.T, u *unstructured.Unstructured) *v1alpha1.Application {
	t.Helper()
	app := &v1alpha1.Application{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, app); err != nil {
		t.Fatal(err)
	}
	return app
}

// grantSecrets lets wavesSA manage Secrets in wavesDestNS (removed when the
// test ends).
func grantSecrets(t *testing.T) {
	t.Helper()
	role(t, wavesDestNS, "waves-secrets", wavesDestNS, wavesSA,
		rule("", []string{"secrets"}, "get", "list", "watch", "create", "update", "patch", "delete"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs := admin(t)
		_ = cs.RbacV1().RoleBindings(wavesDestNS).Delete(ctx, "waves-secrets", metav1.DeleteOptions{})
		_ = cs.RbacV1().Roles(wavesDestNS).Delete(ctx, "waves-secrets", metav1.DeleteOptions{})
	})
}

// dynamicResource is the admin's dynamic client of one resource.
func dynamicResource(group, version, resource string) dynamic.NamespaceableResourceInterface {
	return dynamic.NewForConfigOrDie(cp.Admin).Resource(schemaGVR(group, version, resource))
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// Issue 15 in the engine (the contract: /work/notes/issue15-spec.md): sync
// waves wait for health, PreSync hooks run first, a failed hook fails the
// operation and runs the SyncFail hooks, a health timeout names what kept
// the operation from finishing. The engine runs in the test process as the
// controller identity impersonating the project's ServiceAccount, as in
// sync_test.go; every health read is the engine's own (a watch as the
// ServiceAccount), every status is written by the test in the place of the
// controllers this cluster does not run (see sync_waves_env_test.go).

// A two-wave application: wave 1 is not applied while wave 0's Deployment
// is Progressing, is applied once it is Healthy, and the operation ends
// only when wave 1 is Healthy too. deputy.dev/sync-wave wins over Argo CD's
// annotation.
func TestSyncWavesWaitForHealth(t *testing.T) {
	const ns = "waves-order"
	project, saUser := engineTenant(t, ns)
	repo := newGitRepo(t)
	repo.write("app/db.yaml", deploymentYAML("db", `argocd.argoproj.io/sync-wave: "0"`))
	repo.write("app/web.yaml", deploymentYAML("web", `argocd.argoproj.io/sync-wave: "1"`))
	// Wave 1 by deputy's own annotation, which wins over Argo CD's.
	repo.write("app/web-settings.yaml", annotatedConfigMap("web-settings", `deputy.dev/sync-wave: "1", argocd.argoproj.io/sync-wave: "0"`))
	repo.commit("two waves")
	engine, _ := newSyncEngine(t, enforced)
	cs := admin(t)
	started := time.Now()
	run := startSync(t, engine, syncer.Request{Application: application("waves", ns, repo.dir, "app", ns), Project: project})

	eventually(t, "wave 0 (Deployment db) is applied", func() error {
		_, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "db", metav1.GetOptions{})
		return err
	})
	// What the deployment controller writes first.
	markDeploymentProgressing(t, ns, "db")
	eventually(t, "the operation reports Deployment db Progressing", func() error {
		return wantHealthCode(run.last("Deployment", "db"), v1alpha1.HealthStatusProgressing)
	})
	consistently(t, "wave 1 waits while wave 0 is Progressing", 3*time.Second, func() error {
		if !run.running() {
			return fmt.Errorf("the operation ended: %s", describeAll(run.final))
		}
		if err := absent("Deployment "+ns+"/web", func() error {
			_, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{})
			return err
		}); err != nil {
			return err
		}
		return absent("ConfigMap "+ns+"/web-settings", func() error {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "web-settings", metav1.GetOptions{})
			return err
		})
	})

	healthyAt := time.Now()
	markDeploymentAvailable(t, ns, "db")
	eventually(t, "wave 1 is applied once wave 0 is Healthy", func() error {
		if _, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "web", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "web-settings", metav1.GetOptions{})
		return err
	})
	consistently(t, "the operation waits for wave 1's health", 2*time.Second, func() error {
		if !run.running() {
			return fmt.Errorf("the operation ended before Deployment web was Healthy: %s", describeAll(run.final))
		}
		return nil
	})
	markDeploymentAvailable(t, ns, "web")
	st := run.wait(t, time.Minute)
	t.Log(describeAll(st))
	if st.Phase != v1alpha1.OperationSucceeded || st.Identity != saUser {
		t.Fatalf("%s", describeAll(st))
	}
	res := resultsByName(st)
	for _, want := range []struct {
		key  string
		wave int64
	}{{"Deployment/db", 0}, {"Deployment/web", 1}, {"ConfigMap/web-settings", 1}} {
		r := res[want.key]
		if r == nil || r.Status != v1alpha1.ResultCodeSynced || r.SyncPhase != v1alpha1.SyncPhaseSync || r.SyncWave != want.wave || r.HookType != "" {
			t.Errorf("%s: want Synced in phase Sync, wave %d, no hook: %+v", want.key, want.wave, r)
			continue
		}
		if err := wantHealthCode(r, v1alpha1.HealthStatusHealthy); err != nil {
			t.Errorf("%s: %v", want.key, err)
		}
	}

	t.Run("the audit log has wave 1 applied after wave 0 turned Healthy, as the ServiceAccount", func(t *testing.T) {
		auditedAs(t, started, saUser, "deployments/db", isWrite("deployments", ns, "db", "patch", "create"))
		for _, ev := range auditedAs(t, started, saUser, "deployments/web", isWrite("deployments", ns, "web", "patch", "create")) {
			if ev.RequestReceivedTimestamp.Before(healthyAt) {
				t.Errorf("Deployment web written at %s, before wave 0 was made Healthy (%s)", ev.RequestReceivedTimestamp, healthyAt)
			}
		}
	})
}

// The preflight asks for watch on what the engine waits for: without it the
// sync fails before it writes anything, naming the permission.
func TestSyncWaveWaitNeedsWatch(t *testing.T) {
	const ns = "waves-nowatch"
	verbs := []string{"get", "list", "create", "update", "patch", "delete"}
	project, saUser := engineTenant(t, ns,
		rule("apps", []string{"deployments"}, verbs...),
		rule("", []string{"configmaps"}, append(verbs, "watch")...))
	repo := newGitRepo(t)
	repo.write("app/db.yaml", deploymentYAML("db", ""))
	repo.write("app/settings.yaml", configMap("nowatch-settings", "a: b"))
	repo.commit("a Deployment to wait for")
	engine, _ := newSyncEngine(t, enforced)
	app := application("nowatch", ns, repo.dir, "app", ns)
	// Should the engine apply and wait after all, it gives up soon.
	app.Spec.SyncPolicy = &v1alpha1.SyncPolicy{HealthTimeout: "5s"}
	st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
	// The permission is worded as the preflight words the others ("watch
	// deployments.apps in namespace NS, for Deployment.apps NS/db").
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "preflight failed: "+saUser) ||
		!strings.Contains(st.Message, "watch deployments.apps") || !strings.Contains(st.Message, "Deployment.apps "+ns+"/db") {
		t.Errorf("%s", describeAll(st))
	}
	cs := admin(t)
	if err := absent("Deployment "+ns+"/db", func() error {
		_, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "db", metav1.GetOptions{})
		return err
	}); err != nil {
		t.Errorf("the preflight failed but: %v", err)
	}
	if err := absent("ConfigMap "+ns+"/nowatch-settings", func() error {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "nowatch-settings", metav1.GetOptions{})
		return err
	}); err != nil {
		t.Errorf("the preflight failed but: %v", err)
	}
}

// A PreSync Job hook is created as the project's ServiceAccount and must
// complete before anything of phase Sync is applied.
func TestSyncPreSyncHookCompletesFirst(t *testing.T) {
	const ns = "waves-presync"
	project, saUser := engineTenant(t, ns)
	repo := newGitRepo(t)
	repo.write("app/migrate.yaml", jobYAML("migrate", `argocd.argoproj.io/hook: PreSync`))
	repo.write("app/settings.yaml", configMap("presync-settings", "app: presync"))
	repo.commit("a PreSync hook")
	engine, _ := newSyncEngine(t, enforced)
	cs := admin(t)
	started := time.Now()
	run := startSync(t, engine, syncer.Request{Application: application("presync", ns, repo.dir, "app", ns), Project: project})

	eventually(t, "the PreSync Job is created", func() error {
		_, err := cs.BatchV1().Jobs(ns).Get(t.Context(), "migrate", metav1.GetOptions{})
		return err
	})
	eventually(t, "the operation reports the hook Running", func() error {
		r := run.last("Job", "migrate")
		if r == nil || r.HookType != v1alpha1.SyncPhasePreSync || r.HookPhase != v1alpha1.HookPhaseRunning {
			return fmt.Errorf("%+v", r)
		}
		return nil
	})
	consistently(t, "phase Sync waits for the PreSync hook", 3*time.Second, func() error {
		if !run.running() {
			return fmt.Errorf("the operation ended: %s", describeAll(run.final))
		}
		return absent("ConfigMap "+ns+"/presync-settings", func() error {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "presync-settings", metav1.GetOptions{})
			return err
		})
	})

	completedAt := time.Now()
	finishJob(t, ns, "migrate", true)
	st := run.wait(t, time.Minute)
	t.Log(describeAll(st))
	if st.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("%s", describeAll(st))
	}
	res := resultsByName(st)
	if r := res["Job/migrate"]; r == nil || r.HookType != v1alpha1.SyncPhasePreSync || r.HookPhase != v1alpha1.HookPhaseSucceeded ||
		r.SyncPhase != v1alpha1.SyncPhasePreSync {
		t.Errorf("Job/migrate: want hook PreSync Succeeded in phase PreSync: %+v", r)
	}
	if r := res["ConfigMap/presync-settings"]; r == nil || r.Status != v1alpha1.ResultCodeSynced || r.SyncPhase != v1alpha1.SyncPhaseSync {
		t.Errorf("ConfigMap/presync-settings: %+v", r)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "presync-settings", metav1.GetOptions{}); err != nil {
		t.Errorf("after the hook: %v", err)
	}
	// The hook was created by the controller impersonating the
	// ServiceAccount (a named hook: created with POST, or with an apply
	// that creates it), and phase Sync written only after it completed.
	auditedAs(t, started, saUser, "jobs/migrate", isWrite("jobs", ns, "migrate", "create", "patch"))
	for _, ev := range auditedAs(t, started, saUser, "configmaps/presync-settings", isWrite("configmaps", ns, "presync-settings", "create", "patch")) {
		if ev.RequestReceivedTimestamp.Before(completedAt) {
			t.Errorf("ConfigMap presync-settings written at %s, before the hook completed (%s)", ev.RequestReceivedTimestamp, completedAt)
		}
	}
}

// A PreSync hook whose Job fails fails the operation: phase Sync is never
// applied, and the SyncFail hook (a ConfigMap, healthy once it exists) runs.
func TestSyncFailedHookRunsSyncFailHooks(t *testing.T) {
	const ns = "waves-hookfail"
	project, saUser := engineTenant(t, ns)
	repo := newGitRepo(t)
	repo.write("app/check.yaml", jobYAML("check", `argocd.argoproj.io/hook: PreSync`))
	repo.write("app/report.yaml", annotatedConfigMap("hookfail-report", `argocd.argoproj.io/hook: SyncFail`))
	repo.write("app/settings.yaml", configMap("hookfail-settings", "app: hookfail"))
	repo.commit("a failing hook")
	engine, _ := newSyncEngine(t, enforced)
	cs := admin(t)
	started := time.Now()
	run := startSync(t, engine, syncer.Request{Application: application("hookfail", ns, repo.dir, "app", ns), Project: project})

	eventually(t, "the PreSync Job is created", func() error {
		_, err := cs.BatchV1().Jobs(ns).Get(t.Context(), "check", metav1.GetOptions{})
		return err
	})
	if err := absent("the SyncFail hook", func() error {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "hookfail-report", metav1.GetOptions{})
		return err
	}); err != nil {
		t.Errorf("while the PreSync hook runs: %v", err)
	}
	finishJob(t, ns, "check", false)
	st := run.wait(t, time.Minute)
	t.Log(describeAll(st))
	if st.Phase != v1alpha1.OperationFailed {
		t.Fatalf("phase %s, want Failed: %s", st.Phase, describeAll(st))
	}
	// The message names the failed hook as the engine names resources
	// (Kind.group NAMESPACE/NAME).
	if !strings.Contains(st.Message, "hook failed: Job.batch "+ns+"/check") {
		t.Errorf("the message does not name the failed hook Job %s/check: %q", ns, st.Message)
	}
	res := resultsByName(st)
	if r := res["Job/check"]; r == nil || r.HookType != v1alpha1.SyncPhasePreSync || r.HookPhase != v1alpha1.HookPhaseFailed {
		t.Errorf("Job/check: want hook PreSync Failed: %+v", r)
	}
	if r := res["ConfigMap/hookfail-report"]; r == nil || r.HookType != v1alpha1.SyncPhaseSyncFail || r.HookPhase != v1alpha1.HookPhaseSucceeded ||
		r.SyncPhase != v1alpha1.SyncPhaseSyncFail {
		t.Errorf("ConfigMap/hookfail-report: want hook SyncFail Succeeded in phase SyncFail: %+v", r)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "hookfail-report", metav1.GetOptions{}); err != nil {
		t.Errorf("the SyncFail hook: %v", err)
	}
	auditedAs(t, started, saUser, "configmaps/hookfail-report", isWrite("configmaps", ns, "hookfail-report", "create", "patch"))
	if err := absent("ConfigMap "+ns+"/hookfail-settings (phase Sync)", func() error {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "hookfail-settings", metav1.GetOptions{})
		return err
	}); err != nil {
		t.Errorf("after a failed PreSync hook: %v", err)
	}
	if r := res["ConfigMap/hookfail-settings"]; r != nil && r.Status == v1alpha1.ResultCodeSynced {
		t.Errorf("ConfigMap/hookfail-settings reported Synced after a failed PreSync hook: %+v", r)
	}
}

// spec.syncPolicy.healthTimeout bounds the wait: a Deployment that never
// becomes healthy fails the operation with a message naming it.
func TestSyncHealthTimeoutNamesTheUnhealthyResource(t *testing.T) {
	const ns = "waves-timeout"
	project, _ := engineTenant(t, ns)
	repo := newGitRepo(t)
	repo.write("app/stuck.yaml", deploymentYAML("stuck", ""))
	repo.write("app/settings.yaml", configMap("timeout-settings", "app: timeout"))
	repo.commit("a Deployment nobody runs")
	engine, _ := newSyncEngine(t, enforced)
	app := application("timeout", ns, repo.dir, "app", ns)
	app.Spec.SyncPolicy = &v1alpha1.SyncPolicy{HealthTimeout: "3s"}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	st := engine.Run(ctx, syncer.Request{Application: app, Project: project}, nil)
	took := time.Since(start)
	t.Logf("%s(after %s)", describeAll(st), took.Round(time.Millisecond))
	if st.Phase != v1alpha1.OperationFailed {
		t.Fatalf("phase %s, want Failed: %s", st.Phase, describeAll(st))
	}
	if !strings.Contains(st.Message, "Deployment.apps "+ns+"/stuck") {
		t.Errorf("the message does not name Deployment %s/stuck: %q", ns, st.Message)
	}
	if !strings.Contains(st.Message, "not healthy within 3s (healthTimeout): Deployment.apps "+ns+"/stuck (Progressing") {
		t.Errorf("the message does not name the timeout (3s): %q", st.Message)
	}
	if strings.Contains(st.Message, "timeout-settings") {
		t.Errorf("the message names the ConfigMap, which was healthy: %q", st.Message)
	}
	if took < 3*time.Second || took > time.Minute {
		t.Errorf("the operation took %s, want the 3s health timeout and a little", took)
	}
	if err := wantHealthCode(resultsByName(st)["Deployment/stuck"], v1alpha1.HealthStatusProgressing); err != nil {
		t.Errorf("Deployment/stuck: %v", err)
	}

	t.Run("the operation's healthTimeout wins over the Application's", func(t *testing.T) {
		app := app.DeepCopy()
		app.Spec.SyncPolicy.HealthTimeout = "10m"
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		st := engine.Run(ctx, syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{HealthTimeout: "2s"}}, nil)
		took := time.Since(start)
		if st.Phase != v1alpha1.OperationFailed || !strings.Contains(st.Message, "within 2s (healthTimeout): Deployment.apps "+ns+"/stuck") || took > time.Minute {
			t.Errorf("after %s: %s", took, describeAll(st))
		}
	})
}

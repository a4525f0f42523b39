package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Issue 15 through the Application controller (cluster mode, a replica of
// deputy as deputy-system/deputy; the contract: /work/notes/issue15-spec.md):
// spec.syncPolicy.retry runs a failed operation again, the Application's
// status records health, and `deputy sync --wait` prints it. As everywhere
// in this suite, no controller runs: the test writes the Deployment status
// the deployment controller would (sync_waves_env_test.go).

// A sync whose preflight fails for want of a permission is retried
// (syncPolicy.retry, limit 3, backoff 1s): the failed attempt leaves
// retryCount 1 and nextRetryAt, the operator grants the permission, and a
// later attempt of the same operation succeeds.
func TestSyncRetrySucceedsOnceThePermissionIsGranted(t *testing.T) {
	env := setupWaves(t)
	env.start(t)
	repo := newGitRepo(t)
	repo.write("retry/settings.yaml", configMap("retry-settings", "app: retry"))
	repo.write("retry/secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: retry-secret\nstringData:\n  password: not-a-secret\n")
	head := repo.commit("a ConfigMap and a Secret")
	app := wavesApplication("retry", repo.dir, "retry")
	app.Spec.SyncPolicy = &v1alpha1.SyncPolicy{Retry: &v1alpha1.RetryStrategy{Limit: 3, Backoff: &v1alpha1.Backoff{Duration: "1s"}}}
	app.Operation = &v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{}, InitiatedBy: v1alpha1.InitiatedBy{Username: "e2e"}}
	// wavesSA may not touch Secrets yet.
	createWavesApplication(t, app)

	var waiting *v1alpha1.OperationState
	eventuallyWithin(t, "the failed attempt is recorded with a retry scheduled", time.Minute, func() error {
		st := getApplication(t, wavesAppNS, "retry").Status.OperationState
		if st == nil || st.RetryCount < 1 || st.NextRetryAt == nil {
			return fmt.Errorf("operation state %+v", st)
		}
		waiting = st.DeepCopy()
		return nil
	})
	t.Logf("waiting for its retry: phase %s, retryCount %d, nextRetryAt %s: %s", waiting.Phase, waiting.RetryCount, waiting.NextRetryAt, waiting.Message)
	// The type's comment: a failed operation waiting for its retry is
	// Running with nextRetryAt set.
	if waiting.Phase != v1alpha1.OperationRunning {
		t.Errorf("phase %s while a retry is scheduled, want Running", waiting.Phase)
	}
	if waiting.RetryCount != 1 {
		t.Errorf("retryCount %d when first seen waiting, want 1 (backoff 1s; the test polls every 100ms)", waiting.RetryCount)
	}
	if d := waiting.NextRetryAt.Sub(time.Now()); d > 5*time.Second {
		t.Errorf("nextRetryAt %s is %s away, want about the 1s backoff", waiting.NextRetryAt, d)
	}
	// The failed attempt's reason stays readable while the retry waits
	// (Argo CD appends "Retrying attempt #N at ..." to the message; that
	// deputy keeps the preflight's message is an assumption).
	if !strings.Contains(waiting.Message, "secrets") {
		t.Errorf("the waiting state does not say what failed (the missing Secret permission): %q", waiting.Message)
	}
	if _, err := admin(t).CoreV1().Secrets(wavesDestNS).Get(t.Context(), "retry-secret", metav1.GetOptions{}); err == nil {
		t.Error("the Secret exists although the ServiceAccount may not create it")
	}

	grantSecrets(t)
	st := waitOperationDone(t, wavesAppNS, "retry", 2*time.Minute)
	t.Log(describeAll(st))
	if st.Phase != v1alpha1.OperationSucceeded || st.SyncResult == nil || st.SyncResult.Revision != head.String() {
		t.Fatalf("after the grant: %s", describeAll(st))
	}
	if st.RetryCount < 1 || st.RetryCount > 3 {
		t.Errorf("retryCount %d, want between 1 and the limit 3", st.RetryCount)
	}
	if st.NextRetryAt != nil {
		t.Errorf("nextRetryAt %s on a finished operation", st.NextRetryAt)
	}
	if st.Identity != wavesSAUser {
		t.Errorf("identity %q, want %s", st.Identity, wavesSAUser)
	}
	if st.Operation.InitiatedBy.Username != "e2e" {
		t.Errorf("initiatedBy %+v: the retry is the same operation", st.Operation.InitiatedBy)
	}
	sec, err := admin(t).CoreV1().Secrets(wavesDestNS).Get(t.Context(), "retry-secret", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Secret after the retry: %v", err)
	}
	if string(sec.Data["password"]) != "not-a-secret" {
		t.Errorf("Secret data %v", sec.Data)
	}
}

// `deputy sync --wait` follows a sync that waits for a Deployment's health,
// prints the health of each resource, and exits 0 once it is Healthy; the
// Application's status then records its health and its resources' health
// (Argo CD's status.health and status.resources).
func TestSyncWaitPrintsHealthAndStatusRecordsIt(t *testing.T) {
	env := setupWaves(t)
	replica := env.start(t)
	repo := newGitRepo(t)
	repo.write("health/api.yaml", deploymentYAML("api", ""))
	repo.write("health/settings.yaml", configMap("api-settings", "app: api"))
	repo.write("health/worker.yaml", deploymentYAML("worker", `argocd.argoproj.io/sync-wave: "1"`))
	repo.commit("two Deployments in two waves")
	createWavesApplication(t, wavesApplication("health", repo.dir, "health"))

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cli := exec.CommandContext(ctx, deputy.Bin, "sync", wavesAppNS+"/health", "--wait",
		"--server", replica.URL, "--cacert", filepath.Join(deputy.CertDir, "ca.crt"))
	cli.Env = append(os.Environ(), "DEPUTY_TOKEN="+wavesOperatorToken)
	cli.Stdout, cli.Stderr = &out, &out
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cli.Wait() }()

	cs := admin(t)
	for _, name := range []string{"api", "worker"} {
		eventually(t, "Deployment "+name+" is applied", func() error {
			_, err := cs.AppsV1().Deployments(wavesDestNS).Get(t.Context(), name, metav1.GetOptions{})
			return err
		})
		select {
		case err := <-exited:
			t.Fatalf("deputy sync --wait exited (%v) before Deployment %s was Healthy:\n%s", err, name, out.String())
		default:
		}
		markDeploymentAvailable(t, wavesDestNS, name)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("deputy sync --wait: %v\n%s", err, out.String())
		}
	case <-ctx.Done():
		t.Fatalf("deputy sync --wait did not end:\n%s", out.String())
	}
	output := out.String()
	t.Logf("deputy sync --wait:\n%s", output)

	t.Run("the output names each resource's health and the outcome", func(t *testing.T) {
		// One line per change: "wave 1  apps/Deployment NS/NAME  Synced
		// Healthy: ...  created".
		lines := strings.Split(output, "\n")
		for _, name := range []string{"api", "worker"} {
			prefix := "apps/Deployment " + wavesDestNS + "/" + name + " "
			healthy := false
			for _, l := range lines {
				if strings.Contains(l, prefix) && strings.Contains(l, "Synced  "+v1alpha1.HealthStatusHealthy+":") {
					healthy = true
				}
			}
			if !healthy {
				t.Errorf("no line %q... naming %s", prefix, v1alpha1.HealthStatusHealthy)
			}
		}
		if !strings.Contains(output, "Succeeded as "+wavesSAUser) {
			t.Errorf("no final line %q", "Succeeded as "+wavesSAUser)
		}
	})

	t.Run("the Application's status records its health and its resources'", func(t *testing.T) {
		var app *v1alpha1.Application
		eventuallyWithin(t, "status.health is Healthy", 30*time.Second, func() error {
			app = getApplication(t, wavesAppNS, "health")
			if app.Status.Health.Status != v1alpha1.HealthStatusHealthy {
				return fmt.Errorf("status.health %+v", app.Status.Health)
			}
			return nil
		})
		if app.Status.Sync.Status != v1alpha1.SyncStatusCodeSynced {
			t.Errorf("status.sync %+v, want Synced", app.Status.Sync)
		}
		// Argo CD records lastTransitionTime with the health; deputy's type
		// has it for the Application's health.
		if app.Status.Health.LastTransitionTime == nil {
			t.Errorf("status.health has no lastTransitionTime: %+v", app.Status.Health)
		}
		byName := map[string]v1alpha1.ResourceStatus{}
		for _, r := range app.Status.Resources {
			byName[r.Kind+"/"+r.Name] = r
		}
		raw, _ := json.MarshalIndent(app.Status.Resources, "", "  ")
		for _, want := range []struct {
			key, group, version string
			wave                int64
		}{{"Deployment/api", "apps", "v1", 0}, {"Deployment/worker", "apps", "v1", 1}, {"ConfigMap/api-settings", "", "v1", 0}} {
			r, ok := byName[want.key]
			if !ok {
				t.Errorf("status.resources lacks %s:\n%s", want.key, raw)
				continue
			}
			if r.Group != want.group || r.Version != want.version || r.Namespace != wavesDestNS || r.Status != v1alpha1.SyncStatusCodeSynced || r.SyncWave != want.wave {
				t.Errorf("status.resources %s: %+v, want group %q version %s namespace %s Synced wave %d", want.key, r, want.group, want.version, wavesDestNS, want.wave)
			}
			// A ConfigMap is Healthy once it exists in deputy's contract;
			// Argo CD leaves health out for kinds it has no check for, so
			// a missing health on the ConfigMap is accepted here.
			if r.Health == nil && strings.HasPrefix(want.key, "ConfigMap/") {
				continue
			}
			if r.Health == nil || r.Health.Status != v1alpha1.HealthStatusHealthy {
				t.Errorf("status.resources %s health %+v, want Healthy", want.key, r.Health)
			}
		}
		if len(app.Status.Resources) != 3 {
			t.Errorf("status.resources has %d entries, want 3:\n%s", len(app.Status.Resources), raw)
		}
		st := app.Status.OperationState
		if st == nil || st.Phase != v1alpha1.OperationSucceeded {
			t.Fatalf("operation state %+v", st)
		}
		res := resultsByName(st)
		for _, name := range []string{"Deployment/api", "Deployment/worker"} {
			if err := wantHealthCode(res[name], v1alpha1.HealthStatusHealthy); err != nil {
				t.Errorf("operation result %s: %v", name, err)
			}
		}
	})
}

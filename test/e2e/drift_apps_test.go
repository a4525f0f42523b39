package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/test/framework"
)

// Issue 16 (points 1 and 2) in cluster mode, on a replica of deputy
// (setupWaves' environment) with a 10 s reconcile period: `deputy diff`
// shows a changed value, a new object, one to prune and a masked Secret
// (exit 1), and nothing after a sync (exit 0); an object edited with
// kubectl by another field manager turns the Application OutOfSync within
// the reconcile period, naming the field; selfHeal repairs it.

// driftPeriod is the replica's sync.reconcilePeriod (its minimum).
const driftPeriod = 10 * time.Second

// deputyDiff runs `deputy diff NS/NAME` against replica as the waves
// operator and returns its output and exit code.
func deputyDiff(t *testing.T, replica *framework.Deputy, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cli := exec.CommandContext(ctx, deputy.Bin, append([]string{"diff", wavesAppNS + "/" + name,
		"--server", replica.URL, "--cacert", filepath.Join(deputy.CertDir, "ca.crt")}, args...)...)
	cli.Env = append(os.Environ(), "DEPUTY_TOKEN="+wavesOperatorToken)
	cli.Stdout, cli.Stderr = &out, &out
	err := cli.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	}
	t.Fatalf("deputy diff: %v\n%s", err, out.String())
	return "", -1
}

func waitSyncStatus(t *testing.T, name, want string, within time.Duration) *v1alpha1.Application {
	t.Helper()
	var app *v1alpha1.Application
	eventuallyWithin(t, "Application "+name+" is "+want, within, func() error {
		app = getApplication(t, wavesAppNS, name)
		if app.Status.Sync.Status != want || (app.Status.OperationState != nil && app.Status.OperationState.Phase == v1alpha1.OperationRunning) {
			return fmt.Errorf("status.sync %+v, conditions %+v, resources %+v", app.Status.Sync, app.Status.Conditions, app.Status.Resources)
		}
		return nil
	})
	return app
}

func TestDriftDiffAndSelfHealInClusterMode(t *testing.T) {
	env := setupWaves(t)
	grantSecrets(t)
	replica := env.startWith(t, "  reconcilePeriod: 10s\n")
	secret := func(password string) string {
		return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: drift-creds\ndata:\n  password: " + base64.StdEncoding.EncodeToString([]byte(password)) + "\n"
	}
	repo := newGitRepo(t)
	repo.write("drift/settings.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: drift-settings\ndata:\n  color: blue\n")
	repo.write("drift/old.yaml", configMap("drift-old", "app: drift"))
	repo.write("drift/secret.yaml", secret("first-password-77"))
	repo.commit("first")
	// Not automated until the selfHeal step: Git moving must not sync it
	// before the diff steps look.
	app := wavesApplication("drift", repo.dir, "drift")
	app.Operation = &v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{Prune: true}, InitiatedBy: v1alpha1.InitiatedBy{Username: "e2e"}}
	createWavesApplication(t, app)
	waitSyncStatus(t, "drift", v1alpha1.SyncStatusCodeSynced, 2*time.Minute)
	eventuallyWithin(t, "the first comparison sets status.reconciledAt", driftPeriod, func() error {
		if st := getApplication(t, wavesAppNS, "drift").Status; st.ReconciledAt == nil {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})

	t.Run("deputy diff after a sync shows nothing and exits 0", func(t *testing.T) {
		out, code := deputyDiff(t, replica, "drift")
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})

	cs := admin(t)
	t.Run("an edit by another field manager turns the Application OutOfSync within the reconcile period", func(t *testing.T) {
		edited := time.Now()
		if out, stderr, err := cp.Kubectl(t.Context(), nil, "-n", wavesDestNS, "patch", "configmap", "drift-settings", "--type", "merge",
			"-p", `{"data":{"color":"red"}}`, "--field-manager", "kubectl-edit"); err != nil {
			t.Fatalf("kubectl patch: %v\n%s%s", err, out, stderr)
		}
		app := waitSyncStatus(t, "drift", v1alpha1.SyncStatusCodeOutOfSync, driftPeriod+5*time.Second)
		t.Logf("OutOfSync %s after the edit", time.Since(edited).Round(100*time.Millisecond))
		found := false
		for _, r := range app.Status.Resources {
			if r.Name == "drift-settings" {
				found = r.Status == v1alpha1.SyncStatusCodeOutOfSync && strings.Contains(r.Message, ".data.color")
				t.Logf("status.resources: %+v", r)
			} else if r.Status != v1alpha1.SyncStatusCodeSynced {
				t.Errorf("%s is %s: %s", r.Name, r.Status, r.Message)
			}
		}
		if !found {
			t.Errorf("status.resources does not name drift-settings' .data.color: %+v", app.Status.Resources)
		}
		// Without selfHeal nothing repairs it.
		time.Sleep(3 * time.Second)
		if cm, err := cs.CoreV1().ConfigMaps(wavesDestNS).Get(t.Context(), "drift-settings", metav1.GetOptions{}); err != nil || cm.Data["color"] != "red" {
			t.Errorf("without selfHeal the edit was undone: %v %v", cm.Data, err)
		}
	})

	repo.write("drift/settings.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: drift-settings\ndata:\n  color: green\n")
	repo.remove("drift/old.yaml")
	repo.write("drift/new.yaml", configMap("drift-new", "app: drift"))
	repo.write("drift/secret.yaml", secret("second-password-88"))
	head := repo.commit("second")

	t.Run("deputy diff shows the changed value, the new object, the one to prune and the Secret masked, exit 1", func(t *testing.T) {
		out, code := deputyDiff(t, replica, "drift", "--revision", head.String())
		t.Logf("deputy diff:\n%s", out)
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		for _, want := range []string{"-  color: red", "+  color: green", "drift-new", "+  greeting: hello", "drift-old", "password: ++++"} {
			if !strings.Contains(out, want) {
				t.Errorf("the output lacks %q", want)
			}
		}
		for _, leak := range []string{"first-password-77", "second-password-88", base64.StdEncoding.EncodeToString([]byte("first-password-77")),
			base64.StdEncoding.EncodeToString([]byte("second-password-88"))} {
			if strings.Contains(out, leak) {
				t.Errorf("the output shows a Secret value (%q)", leak)
			}
		}
		if cm, err := cs.CoreV1().ConfigMaps(wavesDestNS).Get(t.Context(), "drift-settings", metav1.GetOptions{}); err != nil || cm.Data["color"] != "red" {
			t.Errorf("deputy diff changed the ConfigMap: %v %v", cm.Data, err)
		}
	})

	t.Run("selfHeal syncs the drifted Application back to Git", func(t *testing.T) {
		patch := `{"spec":{"syncPolicy":{"automated":{"prune":true,"selfHeal":true}}}}`
		if _, err := applicationsClient().Namespace(wavesAppNS).Patch(t.Context(), "drift", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventuallyWithin(t, "selfHeal applied Git's value", 2*driftPeriod, func() error {
			cm, err := cs.CoreV1().ConfigMaps(wavesDestNS).Get(t.Context(), "drift-settings", metav1.GetOptions{})
			if err != nil || cm.Data["color"] != "green" {
				return fmt.Errorf("%v %v", cm.Data, err)
			}
			return nil
		})
		app := waitSyncStatus(t, "drift", v1alpha1.SyncStatusCodeSynced, 2*driftPeriod)
		if app.Status.Sync.Revision != head.String() {
			t.Errorf("status.sync.revision %s, want %s", app.Status.Sync.Revision, head)
		}
		if _, err := cs.CoreV1().ConfigMaps(wavesDestNS).Get(t.Context(), "drift-old", metav1.GetOptions{}); err == nil {
			t.Error("drift-old was not pruned")
		}
		out, code := deputyDiff(t, replica, "drift")
		if code != 0 {
			t.Errorf("deputy diff after the sync: exit %d\n%s", code, out)
		}
		// Drift again: selfHeal repairs it without anyone syncing.
		if out, stderr, err := cp.Kubectl(t.Context(), nil, "-n", wavesDestNS, "patch", "configmap", "drift-settings", "--type", "merge",
			"-p", `{"data":{"color":"purple"}}`, "--field-manager", "kubectl-edit"); err != nil {
			t.Fatalf("kubectl patch: %v\n%s%s", err, out, stderr)
		}
		eventuallyWithin(t, "selfHeal undid the second edit", 2*driftPeriod, func() error {
			cm, err := cs.CoreV1().ConfigMaps(wavesDestNS).Get(t.Context(), "drift-settings", metav1.GetOptions{})
			if err != nil || cm.Data["color"] != "green" {
				return fmt.Errorf("%v %v", cm.Data, err)
			}
			return nil
		})
	})
}

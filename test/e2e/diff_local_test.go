package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
)

// deputy diff --local against a cluster-mode replica: the manifests of a
// local directory, not Git, are dry-run as the project's ServiceAccount
// and compared with the live objects (exit 1 for a change); a kind the
// project forbids is refused as a sync would refuse it (exit 2).
func TestDiffLocalInClusterMode(t *testing.T) {
	env := setupWaves(t)
	replica := env.startWith(t, "  reconcilePeriod: 10s\n")
	repo := newGitRepo(t)
	repo.write("local/settings.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local-settings\ndata:\n  color: blue\n")
	repo.write("local/old.yaml", configMap("local-old", "app: local"))
	repo.commit("first")
	app := wavesApplication("local", repo.dir, "local")
	app.Operation = &v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{Prune: true}, InitiatedBy: v1alpha1.InitiatedBy{Username: "e2e"}}
	createWavesApplication(t, app)
	waitSyncStatus(t, "local", v1alpha1.SyncStatusCodeSynced, 2*time.Minute)

	write := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, content := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}

	t.Run("the working copy's change, a new object and one to prune, exit 1", func(t *testing.T) {
		dir := write(t, map[string]string{
			"settings.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local-settings\ndata:\n  color: green\n",
			"more/new.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local-new\ndata:\n  greeting: hello\n",
			".git/ignored.yaml": "not: [yaml",
		})
		out, code := deputyDiff(t, replica, "local", "--local", dir)
		t.Logf("deputy diff --local:\n%s", out)
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		for _, want := range []string{"===== v1/ConfigMap " + wavesDestNS + "/local-settings (update)", "-  color: blue", "+  color: green",
			"===== v1/ConfigMap " + wavesDestNS + "/local-new (create)", "+  greeting: hello", "local-old (prune", "as " + wavesSAUser} {
			if !strings.Contains(out, want) {
				t.Errorf("the output lacks %q", want)
			}
		}
		if strings.Contains(out, "revision") {
			t.Errorf("a local diff names a revision:\n%s", out)
		}
		cm, err := admin(t).CoreV1().ConfigMaps(wavesDestNS).Get(t.Context(), "local-settings", metav1.GetOptions{})
		if err != nil || cm.Data["color"] != "blue" {
			t.Errorf("deputy diff --local changed the ConfigMap: %v %v", cm.Data, err)
		}
	})

	t.Run("the same manifests as Git, exit 0", func(t *testing.T) {
		dir := write(t, map[string]string{
			"settings.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local-settings\ndata:\n  color: blue\n",
			"old.yaml":      configMap("local-old", "app: local"),
		})
		if out, code := deputyDiff(t, replica, "local", "--local", dir); code != 0 {
			t.Errorf("exit %d, want 0:\n%s", code, out)
		}
	})

	t.Run("a kind the project forbids is refused, exit 2", func(t *testing.T) {
		dir := write(t, map[string]string{
			"settings.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local-settings\ndata:\n  color: blue\n",
			"role.yaml":     "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: local-escalate\nrules:\n- {apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}\n",
		})
		out, code := deputyDiff(t, replica, "local", "--local", dir)
		t.Logf("deputy diff --local:\n%s", out)
		if code != 2 || !strings.Contains(out, `the manifests break AppProject "`+wavesProject+`"`) || !strings.Contains(out, "ClusterRole") {
			t.Errorf("exit %d, want 2 naming the project and the ClusterRole:\n%s", code, out)
		}
	})
}

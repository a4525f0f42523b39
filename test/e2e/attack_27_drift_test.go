package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// Issue 16, drift across tenants (attack 27), on a cluster-mode replica with
// a 10 s reconcile period: tenant B puts tenant A's tracking value on
// ConfigMaps in B's own namespace, and A's status records (forged) one of
// them. A's status never lists B's object, A's selfHeal and prune never
// delete it, A's comparison does not reach into B's namespace
// (ComparisonError would say A's ServiceAccount may not list there); and
// B editing its own objects does not make deputy compare another tenant's
// Application (C, whose every comparison fails and is logged) more often
// than its period.
func TestAttack27DriftStaysWithinTheApplication(t *testing.T) {
	env := setupWaves(t)
	replica := env.startWith(t, "  reconcilePeriod: 10s\n")
	const nsA, nsB = "attack27-a", "attack27-b"
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	deletionTenant(t, nsA, nsA, all...)
	deletionTenant(t, nsB, nsB, all...)
	appA := syncedDeletableApp(t, "a27-a", nsA, nsA, v1alpha1.BackgroundResourcesFinalizer, "a27-a-own")
	syncedDeletableApp(t, "a27-b", nsB, nsB, v1alpha1.BackgroundResourcesFinalizer, "a27-b-own")
	patch := `{"spec":{"syncPolicy":{"automated":{"prune":true,"selfHeal":true}}}}`
	if _, err := applicationsClient().Namespace(wavesAppNS).Patch(t.Context(), "a27-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// C: an Application whose source does not render; every comparison of
	// it fails and the replica logs it.
	repoC := newGitRepo(t)
	repoC.write("elsewhere/cm.yaml", configMap("a27-c-own", "app: c"))
	repoC.commit("c")
	createWavesApplication(t, wavesApplication("a27-c", repoC.dir, "no-such-path"))

	// B's forgeries, in B's namespace.
	lookAlike(t, nsB, "a27-forged-a", map[string]string{syncer.TrackingAnnotation: wavesAppNS + "/a27-a"})
	lookAlike(t, nsB, "a27-forged-c", map[string]string{syncer.TrackingAnnotation: wavesAppNS + "/a27-c"})
	// A's forged status: its last operation "recorded" B's ConfigMap.
	u, err := applicationsClient().Namespace(wavesAppNS).Get(t.Context(), "a27-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := appA.Status.DeepCopy()
	st.OperationState.SyncResult.Resources = append(st.OperationState.SyncResult.Resources,
		&v1alpha1.ResourceResult{Version: "v1", Kind: "ConfigMap", Namespace: nsB, Name: "a27-forged-a", Status: v1alpha1.ResultCodeSynced})
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = content
	if _, err := applicationsClient().Namespace(wavesAppNS).UpdateStatus(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("B's object with A's tracking value never enters A's status nor is deleted", func(t *testing.T) {
		deadline := time.Now().Add(2*driftPeriod + 5*time.Second)
		compared := false
		for time.Now().Before(deadline) {
			app := getApplication(t, wavesAppNS, "a27-a")
			for _, r := range app.Status.Resources {
				if r.Namespace == nsB {
					t.Fatalf("A's status.resources lists B's object: %+v", r)
				}
			}
			for _, c := range app.Status.Conditions {
				if c.Type == v1alpha1.ApplicationConditionComparisonError {
					t.Fatalf("A's comparison reached outside its destinations: %s", c.Message)
				}
			}
			compared = compared || app.Status.ReconciledAt != nil && app.Status.Sync.Status == v1alpha1.SyncStatusCodeSynced
			if err := configMapExists(t, nsB, "a27-forged-a"); err != nil {
				t.Fatalf("B's ConfigMap with A's tracking value: %v", err)
			}
			time.Sleep(time.Second)
		}
		if !compared {
			t.Errorf("A was never compared Synced: %+v", getApplication(t, wavesAppNS, "a27-a").Status)
		}
	})

	t.Run("B's edits of its own objects do not make deputy compare C", func(t *testing.T) {
		looks := func() int {
			n := 0
			for _, l := range strings.Split(replica.Logs(), "\n") {
				if strings.Contains(l, "cannot compare the live state with Git") && strings.Contains(l, wavesAppNS+"/a27-c") {
					n++
				}
			}
			return n
		}
		eventuallyWithin(t, "C's first failed comparison", 2*driftPeriod, func() error {
			if looks() == 0 {
				return fmt.Errorf("no comparison of C logged yet")
			}
			return nil
		})
		const window = 15 * time.Second
		before := looks()
		cs := admin(t)
		for i, end := 0, time.Now().Add(window); time.Now().Before(end); i++ {
			p := fmt.Sprintf(`{"data":{"k":"edit-%d"}}`, i)
			if _, err := cs.CoreV1().ConfigMaps(nsB).Patch(t.Context(), "a27-forged-c", types.MergePatchType, []byte(p), metav1.PatchOptions{FieldManager: fmt.Sprintf("tenant-b-%d", i%2)}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		got := looks() - before
		t.Logf("C compared %d times in %s while B edited its own ConfigMap carrying C's tracking value (period %s)", got, window, driftPeriod)
		if limit := int(window/driftPeriod) + 2; got > limit {
			t.Errorf("B's edits made deputy compare C %d times in %s (its period allows about %d): a tenant drives other tenants' comparisons", got, window, limit)
		}
	})
}

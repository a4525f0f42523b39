package syncer

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"deputy.dev/deputy/policy/v1alpha1"
)

// A sync without prune still looks for the objects prune would delete (the
// Application tracks them, it no longer renders them): each is reported
// PruneSkipped "would be pruned (prune is off)" and left in place, and the
// sync status after it is OutOfSync, as Argo CD's requiresPruning makes the
// Application OutOfSync.
func TestSyncWithoutPruneReportsWhatPruneWouldDelete(t *testing.T) {
	const self, other = "argocd/guestbook", "argocd/other"
	tracked := func(app string) map[string]string { return map[string]string{TrackingAnnotation: app} }
	for _, tc := range []struct {
		name       string
		denied     []string
		dryRun     bool
		want       map[string]string // name -> "Status: message" of the prune results
		wantStatus string            // after the sync ("" when it tells nothing)
		wantInMsg  string
	}{
		{name: "an orphan is reported, not deleted, and the Application is OutOfSync",
			want:       map[string]string{"orphan": "PruneSkipped: " + pruneOffMessage},
			wantStatus: v1alpha1.SyncStatusCodeOutOfSync, wantInMsg: "1 would be pruned (prune is off)"},
		{name: "a dry run reports it too",
			dryRun: true, want: map[string]string{"orphan": "PruneSkipped: " + pruneOffMessage}},
		{name: "where the identity may not list, nothing is reported and the sync still succeeds",
			denied: []string{"list"}, want: map[string]string{}, wantStatus: v1alpha1.SyncStatusCodeSynced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &ownershipCluster{objects: map[string]map[string]string{
				"mine":    tracked(self),
				"orphan":  tracked(self),  // this Application's, no longer rendered
				"foreign": tracked(other), // another Application's: never this one's to prune
				"manual":  {"note": "tracked by nobody"},
			}, denied: map[string]bool{}}
			for _, v := range tc.denied {
				c.denied[v] = true
			}
			st := ownershipSync(t, c, false, tc.dryRun, "mine")
			if st.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("phase %s (%s), want Succeeded", st.Phase, st.Message)
			}
			got := map[string]string{}
			for name, r := range ownershipResults(st) {
				if strings.HasPrefix(r, v1alpha1.ResultCodePruneSkipped) || strings.HasPrefix(r, v1alpha1.ResultCodePruned) {
					got[name] = r
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("prune results %v, want %v", got, tc.want)
			}
			for name, want := range tc.want {
				if got[name] != want {
					t.Errorf("%s: %q, want %q", name, got[name], want)
				}
			}
			writes := slices.Clone(c.writes)
			sort.Strings(writes)
			for _, w := range writes {
				if strings.HasPrefix(w, "delete") {
					t.Errorf("writes %q: a sync without prune deleted", writes)
				}
			}
			if _, ok := c.objects["orphan"]; !ok {
				t.Error("the orphan is gone")
			}
			if !strings.Contains(st.Message, tc.wantInMsg) {
				t.Errorf("message %q, want it to contain %q", st.Message, tc.wantInMsg)
			}
			if tc.wantStatus == "" {
				return // a dry run (ownershipSync sets it after the state was made: TestSyncStatusAfter covers it)
			}
			sync, ok := v1alpha1.SyncStatusAfter(st)
			if !ok || sync.Status != tc.wantStatus {
				t.Errorf("sync status after it %+v (%v), want %s", sync, ok, tc.wantStatus)
			}
		})
	}
}

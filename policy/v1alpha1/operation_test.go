package v1alpha1

import "testing"

// The sync status an operation's final state implies.
func TestSyncStatusAfter(t *testing.T) {
	state := func(phase string, dryRun bool, results ...string) *OperationState {
		st := &OperationState{Phase: phase, Operation: Operation{Sync: &SyncOperation{DryRun: dryRun}},
			SyncResult: &SyncOperationResult{Revision: "abc"}}
		for _, r := range results {
			st.SyncResult.Resources = append(st.SyncResult.Resources, &ResourceResult{Kind: "ConfigMap", Name: r, Status: r})
		}
		return st
	}
	for _, tc := range []struct {
		name   string
		state  *OperationState
		want   string
		wantOK bool
	}{
		{"a successful sync is Synced", state(OperationSucceeded, false, "Synced", "Pruned"), SyncStatusCodeSynced, true},
		{"a successful sync that left objects prune would delete is OutOfSync",
			state(OperationSucceeded, false, "Synced", "PruneSkipped"), SyncStatusCodeOutOfSync, true},
		{"a dry run tells nothing", state(OperationSucceeded, true, "Synced"), "", false},
		{"a failed sync tells nothing", state(OperationFailed, false, "SyncFailed"), "", false},
		{"a running sync tells nothing", state(OperationRunning, false), "", false},
		{"no state tells nothing", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := SyncStatusAfter(tc.state)
			if ok != tc.wantOK || got.Status != tc.want || (ok && got.Revision != "abc") {
				t.Errorf("SyncStatusAfter = %+v, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

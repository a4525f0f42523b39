package main

import (
	"slices"
	"testing"

	"deputy.dev/deputy/policy/v1alpha1"
)

// After a sync that leaves objects prune would delete, `deputy sync` names
// them and says how to delete them; otherwise it adds nothing.
func TestSyncNamesTheObjectsPruneWouldDelete(t *testing.T) {
	state := func(phase string, prune, dryRun bool, results ...*v1alpha1.ResourceResult) *v1alpha1.OperationState {
		return &v1alpha1.OperationState{Phase: phase, Operation: v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{Prune: prune, DryRun: dryRun}},
			SyncResult: &v1alpha1.SyncOperationResult{Revision: "abc", Resources: results}}
	}
	synced := &v1alpha1.ResourceResult{Version: "v1", Kind: "ConfigMap", Namespace: "guestbook", Name: "kept", Status: v1alpha1.ResultCodeSynced}
	orphan := &v1alpha1.ResourceResult{Version: "v1", Kind: "ConfigMap", Namespace: "guestbook", Name: "old",
		Status: v1alpha1.ResultCodePruneSkipped, Message: "would be pruned (prune is off)"}
	for _, tc := range []struct {
		name  string
		state *v1alpha1.OperationState
		want  []string
	}{
		{"a sync without prune that left an object", state(v1alpha1.OperationSucceeded, false, false, synced, orphan), []string{
			"OutOfSync: 1 resource is no longer in Git but still there (sync with --prune to delete them):",
			"  ConfigMap guestbook/old  PruneSkipped  would be pruned (prune is off)"}},
		{"a sync with prune that had to leave one", state(v1alpha1.OperationSucceeded, true, false, synced, &v1alpha1.ResourceResult{
			Version: "v1", Kind: "ConfigMap", Namespace: "guestbook", Name: "old", Status: v1alpha1.ResultCodePruneSkipped, Message: "not pruned: project p does not permit it"}), []string{
			"OutOfSync: 1 resource is no longer in Git but still there (each line says why prune left it):",
			"  ConfigMap guestbook/old  PruneSkipped  not pruned: project p does not permit it"}},
		{"a sync that left nothing", state(v1alpha1.OperationSucceeded, false, false, synced), nil},
		{"a dry run (its resource lines say it)", state(v1alpha1.OperationSucceeded, false, true, synced, orphan), nil},
		{"a failed sync (its message says why)", state(v1alpha1.OperationFailed, false, false, synced, orphan), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outOfSyncLines(tc.state); !slices.Equal(got, tc.want) {
				t.Errorf("lines\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

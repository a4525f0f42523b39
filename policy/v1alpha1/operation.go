package v1alpha1

import "slices"

// The wire format of deputy's own API (served by package webhook, called by
// package apiclient), and what a final operation state says about an
// Application.

// APIPath is the path prefix of deputy's own API (group deputy.dev, version
// v1alpha1), laid out as kube-apiserver lays out a group's resources:
// APIPath + "/namespaces/NS/applications/NAME" (GET, ?watch=true to follow
// the current operation) and ".../NAME/sync" (POST a SyncOperation).
const APIPath = "/apis/" + Group + "/" + Version

// OperationStreamContentType is the content type of a watch of an
// Application's operation: newline-delimited JSON, one OperationEvent per
// line.
const OperationStreamContentType = "application/x-ndjson"

// Types of OperationEvent.Type.
const (
	// OperationEventResource carries one resource's result
	// (OperationEvent.Resource).
	OperationEventResource = "resource"
	// OperationEventState carries the operation's state
	// (OperationEvent.State).
	OperationEventState = "state"
)

// OperationEvent is one progress event of an operation, as the operations
// queue and the Application controller deliver it to a watcher and as
// deputy's API streams it (one JSON object per line):
// {"type":"resource","resource":{...}} or {"type":"state","state":{...}}.
// Events are shared between watchers: read them, do not modify them.
type OperationEvent struct {
	Type     string          `json:"type"`
	Resource *ResourceResult `json:"resource,omitempty"`
	State    *OperationState `json:"state,omitempty"`
}

// SyncStatusAfter is the Application's sync status as a final operation
// state shows it, and false when the state tells nothing about it (a dry
// run, an operation that did not succeed or is still running). After a
// successful sync it is Synced at the synced revision, unless objects the
// Application tracks but no longer renders still exist (results with status
// PruneSkipped: prune was off, or skipped them): then OutOfSync at that
// revision(s), as Argo CD reports an Application whose resources require
// pruning.
func SyncStatusAfter(state *OperationState) (SyncStatus, bool) {
	if state == nil || state.Phase != OperationSucceeded || state.Operation.Sync == nil || state.Operation.Sync.DryRun || state.SyncResult == nil {
		return SyncStatus{}, false
	}
	status := SyncStatusCodeSynced
	if len(PruneSkipped(state)) > 0 {
		status = SyncStatusCodeOutOfSync
	}
	return SyncStatus{Status: status, Revision: state.SyncResult.Revision, Revisions: slices.Clone(state.SyncResult.Revisions)}, true
}

// PruneSkipped returns the results of state whose objects were left in
// place although the Application no longer renders them (status
// PruneSkipped): each object that prune would delete, or that it skipped.
func PruneSkipped(state *OperationState) []*ResourceResult {
	if state == nil || state.SyncResult == nil {
		return nil
	}
	var out []*ResourceResult
	for _, r := range state.SyncResult.Resources {
		if r != nil && r.Status == ResultCodePruneSkipped {
			out = append(out, r)
		}
	}
	return out
}

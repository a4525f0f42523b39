package apps

import (
	"context"
	"errors"
	"slices"

	"deputy.dev/deputy/apps/gitpush"
	"deputy.dev/deputy/policy/v1alpha1"
)

// initiatedBy is who a sync a push triggered is initiated by.
func initiatedBy(p gitpush.Push) v1alpha1.InitiatedBy {
	return v1alpha1.InitiatedBy{Username: p.Initiator(), Automated: true}
}

// PushResult is what SyncPush did with the Applications a push matches, each
// named "namespace/name", each list sorted.
type PushResult struct {
	// Triggered were started (file mode) or recorded for the leader.
	Triggered []string
	// AlreadyInProgress had an operation pending or running
	// (ErrOperationInProgress).
	AlreadyInProgress []string
	// Manual have no spec.syncPolicy.automated and were left alone.
	Manual []string
	// Failed could not be triggered: "namespace/name: error".
	Failed []string
	// ShuttingDown is true when a trigger failed because deputy stops
	// taking operations (ErrShuttingDown): redeliver to another replica.
	ShuttingDown bool
}

// SyncPush triggers the automated Applications of targets that push affects
// (gitpush.Push.Matches), each once, within ctx, and reports every matching
// Application. Matching follows Argo CD (util/webhook): the same repository
// (gitpush.RepositoryKey) and a targetRevision the push moved (gitpush.RevisionMatches).
// Only Applications with spec.syncPolicy.automated are triggered; the others
// are listed as manual. A failed trigger does not stop the others.
//
// Errors: the list's (policy.ErrNotLoaded before the Applications are
// loaded); trigger failures are in the result, not an error.
func SyncPush(ctx context.Context, targets PushTargets, push gitpush.Push) (PushResult, error) {
	list, err := targets.List()
	if err != nil {
		return PushResult{}, err
	}
	var res PushResult
	for _, app := range list {
		if app == nil || !push.Matches(app) {
			continue
		}
		name := appKey(app.Namespace, app.Name)
		if automated(app) == nil {
			res.Manual = append(res.Manual, name)
			continue
		}
		switch err := targets.Trigger(ctx, app, push); {
		case err == nil:
			res.Triggered = append(res.Triggered, name)
		case errors.Is(err, ErrOperationInProgress):
			res.AlreadyInProgress = append(res.AlreadyInProgress, name)
		default:
			res.ShuttingDown = res.ShuttingDown || errors.Is(err, ErrShuttingDown)
			res.Failed = append(res.Failed, name+": "+err.Error())
		}
	}
	slices.Sort(res.Triggered)
	slices.Sort(res.AlreadyInProgress)
	slices.Sort(res.Manual)
	slices.Sort(res.Failed)
	return res, nil
}

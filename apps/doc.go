// Package apps is deputy's Applications service: its Applications in both
// run modes behind one contract (Applications), as deputy's API and the Git
// push webhook use them.
//
// It owns:
//   - the contract: find an Application and its AppProject, start an
//     operation, its status and progress (Watch), a diff of what a sync
//     would change (Diff: a syncer.Differ in the calling goroutine, on any
//     replica, at most Workers at once, diff.go), and the Git push's
//     targets (PushTargets);
//   - file mode (File): the Applications and AppProjects of the policy
//     snapshot, operations run by the in-process operations queue
//     (Operations: one operation per Application at a time, at most Workers
//     at once, one audit line per operation);
//   - cluster mode (Controller): Applications read through an informer,
//     requested operations recorded on the Application, run by the replica
//     holding the Lease (client-go leader election), states written to the
//     status subresource; automated syncs when Git moved and, with selfHeal,
//     every reconcile period; cascading deletion of a deleted Application's
//     resources when it carries a resources finalizer (controller_delete.go),
//     and the cancellation of a deleted Application's running operation;
//   - retries of failed attempts (spec.syncPolicy.retry, retry.go), status.health
//     and status.resources after each attempt (sub-package appstatus),
//     and the Applications' metrics (Metrics), in both modes;
//   - the rules both modes share, once: whether an Application is automated,
//     which AppProject governs it (policy.ResolveAppProject, "project not
//     usable": ProjectResolver), and which Applications a Git push moves
//     (SyncPush, over sub-package gitpush's matching). Both modes report the
//     sync status an operation leaves with v1alpha1.SyncStatusAfter (Synced
//     at a revision, or OutOfSync when objects prune would delete remain),
//     which deputy's API client reads too.
//
// It must not render or apply manifests itself: an operation is run by a
// syncer.Runner (the sync engine), a diff by a syncer.Differ (the same
// engine), which alone touch an Application's destination, as its project's ServiceAccount. It must not do HTTP (the
// webhook package serves deputy's API and parses the Git providers'
// payloads into a gitpush.Push), read deputy's configuration (its constructors take
// plain options; the composition root maps the configuration onto them), nor
// decide who may impersonate (the authorizer's gate).
package apps

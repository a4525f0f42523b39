package apps

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"deputy.dev/deputy/apps/appstatus"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// statusWriter writes operation states to the status subresource for the
// Operations queue of one term, and removes the operation field once the
// final state is written.
type statusWriter struct {
	c    *Controller
	term *term
}

var errTermEnding = errors.New("not written: this replica stopped leading; the next leader runs the operation again")

// WriteOperationState implements StatusWriter: it writes state unless the
// term ends (errTermEnding), and removes the operation field once a final
// state is written.
func (w *statusWriter) WriteOperationState(ctx context.Context, namespace, name string, state *v1alpha1.OperationState) error {
	if w.term.ending() {
		return errTermEnding
	}
	key := appKey(namespace, name)
	w.c.mu.Lock()
	rec, ok := w.c.running[key]
	w.c.mu.Unlock()
	if !ok {
		return fmt.Errorf("not written: no record of the operation of %s", key)
	}
	state.Interruptions = rec.interruptions
	// A leader that stops renewing is replaced LeaseDuration after its last
	// renewal but notices only RenewDeadline after it: the writes must end
	// within the difference.
	le := w.c.opts.LeaderElection
	ctx, cancel := context.WithTimeout(ctx, le.LeaseDuration-le.RenewDeadline)
	defer cancel()
	if err := w.c.writeStatus(ctx, namespace, name, rec, state); err != nil {
		return err
	}
	if state.Phase == v1alpha1.OperationRunning {
		return nil
	}
	if w.term.ending() {
		return errTermEnding
	}
	return w.c.clearOperation(ctx, namespace, name, rec)
}

// errReplaced is returned for an Application that was deleted and created
// again (another UID) since the operation was recorded.
var errReplaced = errors.New("not written: the Application was deleted (and perhaps created again) since the operation was recorded")

// writeStatus sets status.operationState (and status.sync after a
// successful sync that was not a dry run: v1alpha1.SyncStatusAfter; and
// status.health and status.resources at the end of an attempt:
// recordOutcome) of the Application rec was recorded on, re-reading on
// conflicts. It writes nothing to a replaced Application (errReplaced).
func (c *Controller) writeStatus(ctx context.Context, namespace, name string, rec recordedOperation, state *v1alpha1.OperationState) error {
	return c.changeStatus(ctx, namespace, name, rec.uid, func(status *v1alpha1.ApplicationStatus) bool {
		status.OperationState = state
		if sync, ok := v1alpha1.SyncStatusAfter(state); ok {
			status.Sync = sync
		} else if status.Sync.Status == "" {
			status.Sync.Status = v1alpha1.SyncStatusCodeUnknown
		}
		if appstatus.AttemptEnded(state) {
			appstatus.RecordOutcome(status, state, metav1.Now())
		}
		return true
	})
}

// changeStatus reads the status of Application namespace/name, lets change
// modify it, and writes it when change reports a change, re-reading on
// conflicts; a status that does not decode is replaced. An Application that
// is gone or is another object (not uid) gets nothing written: errReplaced.
func (c *Controller) changeStatus(ctx context.Context, namespace, name string, uid types.UID, change func(*v1alpha1.ApplicationStatus) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := c.client.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errReplaced
		}
		if err != nil {
			return err
		}
		if u.GetUID() != uid {
			return errReplaced
		}
		var status v1alpha1.ApplicationStatus
		if raw, ok := u.Object["status"].(map[string]any); ok {
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status) // a bad old status is replaced
		}
		if !change(&status) {
			return nil
		}
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
		if err != nil {
			return err
		}
		u.Object["status"] = content
		_, err = c.client.Namespace(namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: syncer.FieldManager})
		return err
	})
}

// clearOperation removes the Application's operation field if it still
// holds rec's operation on rec's object: an operation recorded meanwhile
// (after someone removed rec's, as users cancel a sync) stays, and so does
// anything on a replaced Application. However the operation was spelled
// (sameOperation), one that ran is removed.
func (c *Controller) clearOperation(ctx context.Context, namespace, name string, rec recordedOperation) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := c.client.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if u.GetUID() != rec.uid {
			return nil
		}
		have, found := u.Object["operation"]
		if !found || have == nil {
			return nil
		}
		if !sameOperation(u.GetGeneration(), have, rec) {
			c.log.Info("the Application records another operation now; it is left for the next run", "application", appKey(namespace, name))
			return nil
		}
		delete(u.Object, "operation")
		out, err := c.client.Namespace(namespace).Update(ctx, u, metav1.UpdateOptions{FieldManager: syncer.FieldManager})
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.cleared[rec.uid] = out.GetGeneration()
		c.mu.Unlock()
		return nil
	})
}

// sameOperation reports whether the operation field have, read from the
// Application at generation, is still the operation rec records. The field
// is part of what the generation counts (everything but metadata and
// status): at rec's generation it is rec's operation, whatever its
// spelling. After a later change (a spec edit, or the operation removed and
// another recorded) the two are compared as decoded values, never as the
// JSON objects: kube-apiserver keeps what the writer sent ("prune": false,
// "revision": "", an empty initiatedBy), a decoded record drops it, and an
// operation recorded by `kubectl patch` would never compare equal and never
// be removed.
func sameOperation(generation int64, have any, rec recordedOperation) bool {
	if generation == rec.generation {
		return true
	}
	m, ok := have.(map[string]any)
	if !ok {
		return false
	}
	var op v1alpha1.Operation
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &op); err != nil {
		return false
	}
	return equality.Semantic.DeepEqual(op, rec.operation)
}

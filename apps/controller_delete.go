package apps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/apps/appstatus"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// Cascading deletion (cluster mode, the leader): an Application with a
// DeletionTimestamp has its running operation cancelled (Operations.Cancel)
// and, when it carries a resources finalizer (v1alpha1.ResourcesFinalizerOf),
// its tracked resources deleted by the ResourceDeleter as the ServiceAccount
// its AppProject derives, enforcement and preflight as on a sync. Success
// removes exactly that finalizer entry; failure keeps it, sets the
// DeletionError condition (what failed, and how to proceed: grant what is
// missing, or orphan the resources by removing the finalizer) and retries
// with backoff. Nothing is deleted when the deletion cannot be decided
// (project not usable, ServiceAccount missing, enforced without a match):
// the engine fails closed.

// ResourceDeleter deletes an Application's tracked resources
// (syncer.Engine.DeleteResources).
type ResourceDeleter interface {
	DeleteResources(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, opts syncer.DeleteOptions) *v1alpha1.OperationState
}

// Why an operation is cancelled when its Application goes.
const (
	reasonAppDeleted  = "the Application was deleted"
	reasonAppDeleting = "the Application is being deleted"
)

// deletionBackoff is the first wait before a failed deletion is tried
// again; it doubles with each failure, up to the reconcile period.
const deletionBackoff = 5 * time.Second

// finalize handles an Application with a DeletionTimestamp: it cancels its
// operation and, once none runs (Operations' OnFinished queues the
// Application again), starts the deletion of its resources when it carries
// a resources finalizer and none runs yet. The deletion runs in its own
// goroutine (tracked by c.deletions, ended with the term's ctx) rather than
// in the reconcile worker: it can take up to the operation timeout and
// must not hold up the other Applications; it takes one of the operations'
// worker slots while the engine runs, so that syncs and deletions together
// stay within sync.parallelism. A deletion is not an operation of the
// queue: it records no operationState, only the DeletionError condition.
func (c *Controller) finalize(ctx context.Context, ops *Operations, app *v1alpha1.Application) error {
	key := appKey(app.Namespace, app.Name)
	if ops.Cancel(app.Namespace, app.Name, reasonAppDeleting) {
		c.log.Info("the running operation was cancelled: the Application is being deleted", "application", key)
	}
	if ops.Running(app.Namespace, app.Name) {
		return nil // looked at again when it has ended
	}
	finalizer, _, propagation, ok := v1alpha1.ResourcesFinalizerOf(app)
	if !ok {
		return nil
	}
	c.mu.Lock()
	if c.deleting[key] || time.Now().Before(c.deleteFailures[key].notBefore) {
		// Running, or a failed one waits for its backoff (retryDeletion
		// queues it then): an event (its own condition write) does not
		// start it again at once.
		c.mu.Unlock()
		return nil
	}
	c.deleting[key] = true
	c.mu.Unlock()
	c.deletions.Add(1)
	go func() {
		defer c.deletions.Done()
		defer func() {
			c.mu.Lock()
			delete(c.deleting, key)
			c.mu.Unlock()
		}()
		c.runDeletion(ctx, ops, app, finalizer, propagation)
	}()
	return nil
}

// runDeletion deletes app's resources and removes finalizer, or records
// why it cannot (the DeletionError condition) and queues the Application
// again after a backoff. A deletion cut short by the end of the term writes
// nothing: the next leader deletes again.
func (c *Controller) runDeletion(ctx context.Context, ops *Operations, app *v1alpha1.Application, finalizer string, propagation metav1.DeletionPropagation) {
	key := appKey(app.Namespace, app.Name)
	select {
	case ops.slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	message, err := c.deleteResources(ctx, app, finalizer, propagation)
	<-ops.slots
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, policy.ErrNotLoaded) {
		c.retryDeletion(key, false)
		return
	}
	if message == "" {
		// Deleted: the condition goes (when other finalizers keep the
		// Application a while), then exactly this finalizer.
		if err := c.writeDeletionCondition(ctx, app, ""); err != nil {
			c.log.Warn("clearing the DeletionError condition failed", "application", key, "error", err.Error())
		}
		if err := c.removeFinalizer(ctx, app, finalizer); err != nil {
			message = fmt.Sprintf("the Application's resources were deleted, but removing the finalizer %s failed (deputy needs patch on applications.deputy.dev): %v", finalizer, err)
		} else {
			c.mu.Lock()
			delete(c.deleteFailures, key)
			c.mu.Unlock()
			c.log.Info("the Application's resources were deleted; its finalizer was removed", "application", key, "finalizer", finalizer)
			return
		}
	}
	c.log.Warn("deleting the Application's resources failed; the finalizer stays and the deletion is retried", "application", key, "finalizer", finalizer, "error", message)
	if err := c.writeDeletionCondition(ctx, app, message); err != nil {
		c.log.Warn("writing the DeletionError condition failed", "application", key, "error", err.Error())
	}
	c.retryDeletion(key, true)
}

// deleteResources runs the deletion: "" when every tracked resource is
// gone, else the DeletionError message. The error is policy.ErrNotLoaded
// while the AppProjects are not read yet (nothing was tried).
func (c *Controller) deleteResources(ctx context.Context, app *v1alpha1.Application, finalizer string, propagation metav1.DeletionPropagation) (string, error) {
	deleter := c.opts.Deleter
	if deleter == nil {
		deleter, _ = c.opts.Runner.(ResourceDeleter)
	}
	if deleter == nil {
		return deletionMessage(app, finalizer, "this deputy cannot delete resources (its sync engine has no DeleteResources)"), nil
	}
	project, err := c.opts.Projects(app)
	if errors.Is(err, policy.ErrNotLoaded) {
		return "", err
	}
	if err != nil {
		return deletionMessage(app, finalizer, err.Error()), nil
	}
	st := deleter.DeleteResources(ctx, app, project, syncer.DeleteOptions{PropagationPolicy: propagation})
	if st != nil && st.Phase == v1alpha1.OperationSucceeded {
		c.log.Info("deleted the Application's resources", "application", appKey(app.Namespace, app.Name), "propagationPolicy", string(propagation), "message", st.Message)
		return "", nil
	}
	what := "the deletion returned no result"
	if st != nil {
		what = st.Message
		var failed []string
		if st.SyncResult != nil {
			for _, r := range st.SyncResult.Resources {
				if r.Status == v1alpha1.ResultCodeSyncFailed && len(failed) < 5 {
					failed = append(failed, appstatus.ResourceName(r)+": "+r.Message)
				}
			}
		}
		if len(failed) > 0 {
			what += " (" + strings.Join(failed, "; ") + ")"
		}
	}
	return deletionMessage(app, finalizer, what), nil
}

// deletionMessage is the DeletionError condition's message: what failed
// and how to proceed, with the kubectl command that orphans the resources
// (removes exactly finalizer, at its index, and nothing else).
func deletionMessage(app *v1alpha1.Application, finalizer, what string) string {
	return fmt.Sprintf("deleting the Application's resources failed: %s. The finalizer %s stays and deputy tries again. "+
		"To proceed, fix the cause (grant the ServiceAccount the missing permission, create it, or fix the AppProject), or orphan the resources "+
		"(they are left in place, not deleted) by removing the finalizer: %s", what, finalizer, OrphanCommand(app, finalizer))
}

// OrphanCommand is the kubectl command that removes finalizer from app's
// metadata.finalizers (a JSON patch testing the entry at its index first,
// so that no other finalizer is removed): the Application is then deleted
// and its resources stay.
func OrphanCommand(app *v1alpha1.Application, finalizer string) string {
	i := 0
	for j, f := range app.Finalizers {
		if f == finalizer {
			i = j
			break
		}
	}
	return fmt.Sprintf(`kubectl patch applications.deputy.dev %s -n %s --type json -p '[{"op":"test","path":"/metadata/finalizers/%d","value":"%s"},{"op":"remove","path":"/metadata/finalizers/%d"}]'`,
		app.Name, app.Namespace, i, finalizer, i)
}

// retryDeletion queues key again after the deletion backoff (doubled by
// each failure when failed, up to the reconcile period); every reconcile
// period looks at it anyway.
func (c *Controller) retryDeletion(key string, failed bool) {
	c.mu.Lock()
	r := c.deleteFailures[key]
	delay := min(deletionBackoff<<min(r.failures, 16), c.opts.ReconcilePeriod)
	if failed {
		c.deleteFailures[key] = deletionRetry{failures: r.failures + 1, notBefore: time.Now().Add(delay)}
	}
	q := c.queue
	c.mu.Unlock()
	if q != nil {
		q.AddAfter(key, delay)
	}
}

// deletionRetry is the backoff of an Application whose deletion failed.
type deletionRetry struct {
	failures  int
	notBefore time.Time
}

// removeFinalizer removes finalizer from app (the same object: its UID is
// tested) with a JSON patch that tests the entry before removing it: no
// other finalizer is ever removed. A test that fails because the list
// changed meanwhile is retried on the object as it is then.
func (c *Controller) removeFinalizer(ctx context.Context, app *v1alpha1.Application, finalizer string) error {
	client := c.client.Namespace(app.Namespace)
	var last error
	for range 5 {
		u, err := client.Get(ctx, app.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if u.GetUID() != app.UID {
			return nil // another Application now
		}
		i := -1
		for j, f := range u.GetFinalizers() {
			if f == finalizer {
				i = j
				break
			}
		}
		if i < 0 {
			return nil
		}
		path := fmt.Sprintf("/metadata/finalizers/%d", i)
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": string(app.UID)},
			{"op": "test", "path": path, "value": finalizer},
			{"op": "remove", "path": path},
		})
		if err != nil {
			return err
		}
		_, err = client.Patch(ctx, app.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: syncer.FieldManager})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsBadRequest(err):
			last = err // the list changed between the read and the patch
		default:
			return err
		}
	}
	return last
}

// writeDeletionCondition sets status.conditions' DeletionError to message
// ("" removes it), keeping every other condition and the rest of the
// status; it writes only when that changes something (the same failure
// again writes nothing), and nothing to a replaced or deleted Application.
func (c *Controller) writeDeletionCondition(ctx context.Context, app *v1alpha1.Application, message string) error {
	return c.updateStatus(ctx, app, func(status *v1alpha1.ApplicationStatus) bool {
		if !appstatus.SetCondition(status, v1alpha1.ApplicationConditionDeletionError, message) {
			return false
		}
		if status.Sync.Status == "" {
			status.Sync.Status = v1alpha1.SyncStatusCodeUnknown
		}
		return true
	})
}

// updateStatus is changeStatus for app, where an Application deleted or
// replaced meanwhile is not an error: there is nothing to write to.
func (c *Controller) updateStatus(ctx context.Context, app *v1alpha1.Application, change func(*v1alpha1.ApplicationStatus) bool) error {
	if err := c.changeStatus(ctx, app.Namespace, app.Name, app.UID, change); !errors.Is(err, errReplaced) {
		return err
	}
	return nil
}

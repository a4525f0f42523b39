package apps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// lead is one leadership term: it runs until the Lease is lost or rootCtx
// ends.
func (c *Controller) lead(rootCtx, leaderCtx context.Context) {
	done := make(chan struct{})
	t := &term{leader: leaderCtx}
	c.mu.Lock()
	c.termDone = done
	c.cleared = map[types.UID]int64{}
	c.running = map[string]recordedOperation{}
	c.term = t
	c.mu.Unlock()
	defer close(done)
	defer func() {
		c.mu.Lock()
		c.term = nil
		c.mu.Unlock()
	}()
	if rootCtx.Err() != nil {
		return
	}
	c.log.Info("leading syncs: this replica runs operations", "identity", c.identity)
	c.leading.Store(true)
	defer c.leading.Store(false)
	// The moment the Lease is lost this replica stops counting as leader.
	stopLeading := context.AfterFunc(leaderCtx, func() { c.leading.Store(false) })
	defer stopLeading()

	ops := NewOperations(c.opts.Runner, OperationsOptions{Workers: c.opts.Workers, Logger: c.opts.Logger,
		StatusWriter: &statusWriter{c: c, term: t}, Metrics: c.opts.Metrics, BeforeRetry: c.retryTarget,
		// Whether or not the final state was written: the Application is
		// free now, and may record another operation already.
		OnFinished: func(namespace, name string) {
			key := appKey(namespace, name)
			c.mu.Lock()
			delete(c.running, key)
			q := c.queue
			c.liveDue[key] = true // compare what the operation left
			c.mu.Unlock()
			if q != nil {
				q.Add(key)
			}
		}})
	c.ops.Store(ops)
	defer c.ops.Store(nil)
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "deputy-applications"})
	workCtx, stopWork := context.WithCancel(leaderCtx)
	defer stopWork()
	// Stopping deputy ends the wait for the informer too: waitTerm (which
	// holds the Lease until this term returns) must not wait for a cache
	// that never syncs (CRD missing, RBAC missing).
	stopOnRoot := context.AfterFunc(rootCtx, stopWork)
	defer stopOnRoot()

	var wg sync.WaitGroup
	if cache.WaitForCacheSync(workCtx.Done(), c.informer.HasSynced) {
		c.mu.Lock()
		c.queue = queue
		c.mu.Unlock()
		c.dueAll(queue)
		for range reconcileWorkers {
			wg.Go(func() {
				for c.processNext(workCtx, ops, queue) {
				}
			})
		}
		ticker := time.NewTicker(c.opts.ReconcilePeriod)
	loop:
		for {
			select {
			case <-leaderCtx.Done():
				break loop
			case <-rootCtx.Done():
				break loop
			case <-ticker.C:
				c.dueAll(queue)
			}
		}
		ticker.Stop()
	}
	c.mu.Lock()
	c.queue = nil
	c.mu.Unlock()
	queue.ShutDown()
	stopWork()
	wg.Wait()
	// Deletions end with workCtx, writing nothing: the next term (or
	// leader) deletes again.
	c.deletions.Wait()

	if leaderCtx.Err() == nil {
		// Graceful stop while leading: let running operations finish, but
		// only while the Lease is still held: losing it mid-drain cancels
		// them at once (the next leader runs them again).
		drain, cancel := context.WithTimeout(leaderCtx, c.opts.ShutdownGrace)
		defer cancel()
		t.mu.Lock()
		t.drain = drain
		t.mu.Unlock()
		if err := ops.Shutdown(drain); err != nil {
			c.log.Warn("operations still running at shutdown were cancelled; the next leader runs them again", "error", err.Error())
		}
		return
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_ = ops.Shutdown(cancelled)
}

// dueAll marks every Application due for a look (a comparison with Git at
// freshly resolved revisions, and an automated sync's decision) and queues
// it.
func (c *Controller) dueAll(queue workqueue.TypedRateLimitingInterface[string]) {
	for _, obj := range c.informer.GetStore().List() {
		app, ok := obj.(*v1alpha1.Application)
		if !ok {
			continue
		}
		key := appKey(app.Namespace, app.Name)
		c.mu.Lock()
		c.due[key] = true
		c.mu.Unlock()
		queue.Add(key)
	}
}

func (c *Controller) processNext(ctx context.Context, ops *Operations, queue workqueue.TypedRateLimitingInterface[string]) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	if err := c.reconcile(ctx, ops, queue, key); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("reconciling the Application failed; retrying", "application", key, "error", err.Error())
			queue.AddRateLimited(key)
		}
		return true
	}
	queue.Forget(key)
	return true
}

// reconcile runs the operation key's Application records, or, when a look
// is due (due: every period and on a spec change; liveDue: an object it
// tracks changed, or its operation ended), compares it with Git and decides
// on an automated sync (look). An Application being deleted is only
// looked at by its deletion.
func (c *Controller) reconcile(ctx context.Context, ops *Operations, queue workqueue.TypedRateLimitingInterface[string], key string) error {
	app := c.get(key)
	if reason := c.obsolete(key, app); reason != "" {
		ns, name, _ := strings.Cut(key, "/")
		switch {
		case reason == reasonAppDeleted && ops.Cancel(ns, name, reason):
			c.log.Info("the running operation was cancelled", "application", key, "reason", reason)
		case reason != reasonAppDeleted && ops.cancelRetry(ns, name, reason):
			c.log.Info("a waiting retry was cancelled", "application", key, "reason", reason)
		}
	}
	if app == nil {
		return nil
	}
	if app.DeletionTimestamp != nil {
		// Nothing is started for an Application being deleted: its
		// operation is cancelled, its resources deleted (finalize).
		return c.finalize(ctx, ops, app)
	}
	if app.Operation != nil && app.Operation.Sync != nil {
		return c.runRecorded(ctx, ops, app)
	}
	c.mu.Lock()
	due, liveDue := c.due[key], c.liveDue[key]
	delete(c.due, key)
	delete(c.liveDue, key)
	c.mu.Unlock()
	if (!due && !liveDue) || app.DeletionTimestamp != nil || ops.Running(app.Namespace, app.Name) {
		return nil // a running operation's end asks for a look
	}
	c.lookAsync(ctx, app, due, queue)
	return nil
}

// runRecorded starts the operation app records, unless it runs, is done
// (only the removal of the field is pending), or is this term's own
// finished operation seen through a stale cache. A Running state of the
// operation left by another leader is run again (an interruption), unless
// it is a failed attempt waiting for its retry (nextRetryAt): that retry
// runs at its time. An invalid sync (validateSync) or an unusable project
// ends the operation in Error.
func (c *Controller) runRecorded(ctx context.Context, ops *Operations, app *v1alpha1.Application) error {
	key := appKey(app.Namespace, app.Name)
	if ops.Running(app.Namespace, app.Name) {
		return nil
	}
	c.mu.Lock()
	clearedAt, seen := c.cleared[app.UID]
	c.mu.Unlock()
	if seen && app.Generation <= clearedAt {
		return nil // this term's own finished operation, seen through a stale cache
	}
	st := app.Status.OperationState
	var interruptions int64
	var cont *continuation
	if st != nil && st.ObservedGeneration == app.Generation {
		switch {
		case st.Phase != v1alpha1.OperationRunning:
			return c.clearOperation(ctx, app.Namespace, app.Name, recordOf(app))
		case st.NextRetryAt != nil:
			// A failed attempt waits for its retry, decided by a leader that
			// stopped: not an interruption, the retry runs at its time.
			interruptions = st.Interruptions
			cont = &continuation{retryCount: st.RetryCount, waiting: st}
			c.log.Info("resuming the retry of a failed operation", "application", key, "nextRetryAt", st.NextRetryAt.UTC().Format(time.RFC3339), "retryCount", st.RetryCount)
		case st.Interruptions+1 >= MaxOperationAttempts:
			return c.endInterrupted(ctx, app, st.Interruptions+1)
		default:
			interruptions = st.Interruptions + 1
			cont = &continuation{retryCount: st.RetryCount}
			c.log.Info("running an operation again: the leader that started it stopped before it ended",
				"application", key, "startedAt", st.StartedAt.UTC().Format(time.RFC3339), "interruptions", interruptions)
		}
	}
	project, err := c.opts.Projects(app)
	if invalid := validateSync(app, *app.Operation.Sync); errors.Is(err, policy.ErrProjectNotUsable) || (err == nil && invalid != nil) {
		if err == nil {
			err = fmt.Errorf("%w: fix the Application and sync again", invalid)
		}
		now := metav1.Now()
		final := &v1alpha1.OperationState{
			Operation: *app.Operation.DeepCopy(), Phase: v1alpha1.OperationError, Message: err.Error(),
			StartedAt: now, FinishedAt: &now, ObservedGeneration: app.Generation,
		}
		rec := recordOf(app)
		if err := c.writeStatus(ctx, app.Namespace, app.Name, rec, final); err != nil {
			return err
		}
		return c.clearOperation(ctx, app.Namespace, app.Name, rec)
	}
	if err != nil {
		return err
	}
	rec := recordOf(app)
	rec.interruptions = interruptions
	if interruptions > 0 && cont.waiting == nil {
		// Record the attempt before running it: if this one crashes deputy
		// too, the next leader must see it.
		now := metav1.Now()
		running := &v1alpha1.OperationState{
			Operation: *app.Operation.DeepCopy(), Phase: v1alpha1.OperationRunning,
			Message:   fmt.Sprintf("started again after an interruption (attempt %d of at most %d)", interruptions+1, MaxOperationAttempts),
			StartedAt: now, ObservedGeneration: app.Generation, Interruptions: interruptions, RetryCount: st.RetryCount,
		}
		if err := c.writeStatus(ctx, app.Namespace, app.Name, rec, running); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.running[key] = rec
	c.mu.Unlock()
	_, err = ops.start(ctx, app, project, *app.Operation.Sync, app.Operation.InitiatedBy, cont)
	if errors.Is(err, ErrOperationInProgress) || errors.Is(err, ErrShuttingDown) {
		return nil
	}
	return err
}

// endInterrupted ends an operation that was started attempts times without
// ending (each leader running it stopped or crashed) in Error, and removes
// it: it is not run again.
func (c *Controller) endInterrupted(ctx context.Context, app *v1alpha1.Application, attempts int64) error {
	st := app.Status.OperationState
	now := metav1.Now()
	final := &v1alpha1.OperationState{
		Operation: *app.Operation.DeepCopy(), Phase: v1alpha1.OperationError,
		Message:   fmt.Sprintf("the operation was interrupted %d times (deputy stopped or crashed while running it, for example on a repository that exceeds its limits) and is not run again: sync again to retry", attempts),
		StartedAt: st.StartedAt, FinishedAt: &now, ObservedGeneration: app.Generation, Interruptions: st.Interruptions, RetryCount: st.RetryCount,
	}
	c.log.Warn("an operation was interrupted too often; it ends in Error", "application", appKey(app.Namespace, app.Name), "attempts", attempts)
	rec := recordOf(app)
	if err := c.writeStatus(ctx, app.Namespace, app.Name, rec, final); err != nil {
		return err
	}
	return c.clearOperation(ctx, app.Namespace, app.Name, rec)
}

// autoSync requests an automated sync of app at shas (one per source) as
// Argo CD decides one: never while the comparison says Synced; when Git
// moved since the last sync; else (the last sync was of these revisions)
// only with selfHeal, and not when the last sync of these revisions failed
// without selfHeal, nor when all that differs is objects to prune and
// automated prune is off (such a sync changes nothing). selfHeal syncs no
// more often than selfHealWait allows. cmp is nil when nothing was
// compared (no Comparer, or the comparison failed): then Git moving, or
// selfHeal, decides.
func (c *Controller) autoSync(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, shas []string, cmp *syncer.Comparison) error {
	auto := automated(app)
	key := appKey(app.Namespace, app.Name)
	sha := strings.Join(shas, ",")
	last := app.Status.OperationState
	attempted := last != nil && last.Operation.Sync != nil && !last.Operation.Sync.DryRun && last.SyncResult != nil &&
		strings.Join(last.SyncResult.RevisionList(), ",") == sha
	switch {
	case cmp != nil && cmp.Status == v1alpha1.SyncStatusCodeSynced:
		c.mu.Lock()
		delete(c.selfHeal, key)
		c.mu.Unlock()
		return nil
	case !attempted:
		// Git moved since the last sync, or there was none.
	case !auto.SelfHeal && last.Phase != v1alpha1.OperationSucceeded:
		c.log.Info("automated sync skipped: the last sync of this revision failed", "application", key, "revision", sha)
		return nil
	case !auto.SelfHeal, cmp != nil && onlyPruning(cmp) && !auto.Prune:
		return nil
	case cmp == nil && c.opts.Comparer != nil:
		// The comparison failed (ComparisonError): whether the live state
		// drifted is unknown, and syncing again would not tell.
		return nil
	default:
		// Right after an operation the live-state cache may not have seen
		// all of its writes yet (a pruned object still listed): wait
		// selfHealInterval after it, and the next look decides.
		wait := time.Duration(0)
		if last.FinishedAt != nil {
			wait = time.Until(last.FinishedAt.Add(selfHealInterval))
		}
		if wait <= 0 {
			wait = c.selfHealWait(key, time.Now())
		}
		if wait > 0 {
			c.mu.Lock()
			q := c.queue
			c.liveDue[key] = true
			c.mu.Unlock()
			if q != nil {
				q.AddAfter(key, wait)
			}
			return nil
		}
		c.log.Info("selfHeal: the live state differs from Git; syncing", "application", key, "revision", sha)
	}
	op := v1alpha1.SyncOperation{Prune: auto.Prune}
	if app.Spec.HasMultipleSources() {
		op.Revisions = shas
	} else if len(shas) > 0 {
		op.Revision = shas[0]
	}
	_, err := c.Start(ctx, app, project, op, v1alpha1.InitiatedBy{Automated: true})
	if errors.Is(err, ErrInvalidSync) {
		c.log.Warn("automated sync skipped: the Application is invalid", "application", key, "error", err.Error())
		return nil // looked at again next period, or when it changes
	}
	if errors.Is(err, ErrOperationInProgress) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

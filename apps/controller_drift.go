package apps

import (
	"context"
	"errors"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"deputy.dev/deputy/apps/appstatus"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// Drift detection (cluster mode, the leader): every ReconcilePeriod, when an
// Application's spec changes, when an operation of it ends, and shortly
// after an object it tracks changes in its destination (LiveChanged), the
// controller compares the live state with what Git renders
// (ControllerOptions.Comparer: as the derived ServiceAccount, from the
// engine's shared metadata informers, never per object), writes
// status.sync (OutOfSync/Synced and the revisions compared with) and
// status.resources (each Synced or OutOfSync, with why), and an automated
// Application with selfHeal syncs when it drifted (Argo CD's semantics).

const (
	// liveChangeDelay gathers the events of one change (kubectl apply of
	// several objects) into one comparison.
	liveChangeDelay = time.Second
	// selfHealInterval is the least time between two automated syncs of one
	// Application that selfHeal starts (Argo CD's selfHealTimeoutSeconds
	// default, 5 s): a sync that cannot repair the drift does not loop.
	selfHealInterval = 5 * time.Second
)

// LiveChanged tells the controller that an object Application
// namespace/name tracks changed in its destination (the Engine's
// EngineOptions.OnLiveChange): the leader compares it again within about a
// second. It never blocks; it does nothing on a replica that does not lead.
func (c *Controller) LiveChanged(namespace, name string) {
	key := appKey(namespace, name)
	c.mu.Lock()
	q := c.queue
	if q != nil {
		c.liveDue[key] = true
	}
	c.mu.Unlock()
	if q != nil {
		q.AddAfter(key, liveChangeDelay)
	}
}

// look compares app with Git when a comparison is due (full: resolve the
// target revisions again; else the ones resolved last), writes the result
// to its status, and lets autoSync decide on an automated sync.
func (c *Controller) look(ctx context.Context, app *v1alpha1.Application, full bool) error {
	key := appKey(app.Namespace, app.Name)
	project, err := c.opts.Projects(app)
	if errors.Is(err, policy.ErrNotLoaded) {
		return nil // deputy is starting: looked at again next period
	}
	if err != nil {
		c.log.Warn("the Application's AppProject is not usable; not compared, no automated sync", "application", key, "error", err.Error())
		return c.notCompared(ctx, app, err) // looked at again next period
	}
	c.mu.Lock()
	shas, known := c.revs[key]
	c.mu.Unlock()
	if last := lastSynced(app); known && last != "" && last != strings.Join(shas, ",") {
		full = true // an operation synced other revisions since: Git may have moved
	}
	if full || !known {
		if shas, err = c.opts.Revisions.ResolveRevisions(ctx, app, project); err != nil {
			if ctx.Err() != nil {
				return nil // this term ends
			}
			c.log.Warn("cannot resolve the target revision; not compared, no automated sync", "application", key, "error", err.Error())
			return c.notCompared(ctx, app, err) // looked at again next period
		}
		c.mu.Lock()
		c.revs[key] = shas
		c.mu.Unlock()
	}
	var cmp *syncer.Comparison
	if c.opts.Comparer != nil {
		var cmpErr error
		cmp, cmpErr = c.opts.Comparer.Compare(ctx, app, project, shas)
		if cmpErr != nil && ctx.Err() != nil {
			return nil // this term ends
		}
		if err := c.writeComparison(ctx, app, cmp, cmpErr); err != nil {
			return err
		}
		if cmpErr != nil {
			c.log.Info("cannot compare the live state with Git", "application", key, "error", cmpErr.Error())
			cmp = nil
		}
	}
	if automated(app) == nil {
		return nil
	}
	return c.autoSync(ctx, app, project, shas, cmp)
}

// notCompared writes why app could not be compared (ComparisonError,
// status.sync.status Unknown) when drift detection runs.
func (c *Controller) notCompared(ctx context.Context, app *v1alpha1.Application, why error) error {
	if c.opts.Comparer == nil {
		return nil
	}
	return c.writeComparison(ctx, app, nil, why)
}

// lastSynced is the revisions ("," joined) the Application's last
// operation that was not a dry run rendered, "" when there is none.
func lastSynced(app *v1alpha1.Application) string {
	st := app.Status.OperationState
	if st == nil || st.Operation.Sync == nil || st.Operation.Sync.DryRun || st.SyncResult == nil {
		return ""
	}
	return strings.Join(st.SyncResult.RevisionList(), ",")
}

// lookAsync runs look in a goroutine bounded by lookWorkers (and
// liveLookWorkers for looks at the revisions resolved last), one per
// Application at a time (a look due meanwhile runs after it, resolving the
// revisions again if either asked to): a look resolves revisions and may
// wait on a slow Git server, and must not hold up the reconcile workers
// that start recorded operations. A failed look is queued again with the
// queue's back-off.
func (c *Controller) lookAsync(ctx context.Context, app *v1alpha1.Application, full bool, queue workqueue.TypedRateLimitingInterface[string]) {
	key := appKey(app.Namespace, app.Name)
	c.mu.Lock()
	if _, busy := c.looking[key]; busy {
		c.looking[key] = c.looking[key] || full
		c.liveDue[key] = true
		c.mu.Unlock()
		return
	}
	c.looking[key] = false
	c.mu.Unlock()
	// Looks a tracked object's change asked for have slots of their own:
	// they do not wait behind a period's look at every Application.
	slots := c.lookSlots
	if !full {
		slots = c.liveSlots
	}
	go func() {
		select {
		case slots <- struct{}{}:
			err := c.look(ctx, app, full)
			<-slots
			if err != nil && ctx.Err() == nil {
				c.log.Warn("looking at the Application failed; retrying", "application", key, "error", err.Error())
				queue.AddRateLimited(key)
			}
		case <-ctx.Done():
		}
		c.mu.Lock()
		again, fullAgain := c.liveDue[key], c.looking[key]
		delete(c.looking, key)
		if fullAgain {
			c.due[key] = true
		}
		c.mu.Unlock()
		if again && ctx.Err() == nil {
			queue.Add(key)
		}
	}()
}

// writeComparison writes a comparison (or why there is none) to the
// status: status.sync, status.resources (keeping the health the last
// operation recorded for each), reconciledAt and the ComparisonError
// condition. Once reconciledAt is set, nothing is written when nothing but
// reconciledAt would change: a steady Application costs no write per
// period.
func (c *Controller) writeComparison(ctx context.Context, app *v1alpha1.Application, cmp *syncer.Comparison, cmpErr error) error {
	if app.DeletionTimestamp != nil {
		return nil
	}
	changes := func(status *v1alpha1.ApplicationStatus) bool {
		before := status.DeepCopy()
		appstatus.ApplyComparison(status, app, cmp, cmpErr, metav1.Now())
		if before.ReconciledAt == nil {
			return true
		}
		before.ReconciledAt = status.ReconciledAt
		return !equality.Semantic.DeepEqual(before, status)
	}
	// The informer's copy decides first: a steady Application costs no
	// request at all (the write re-reads, and decides again, only when
	// something changed).
	if cached := app.Status.DeepCopy(); !changes(cached) {
		return nil
	}
	return c.updateStatus(ctx, app, changes)
}

// selfHealState is when selfHeal last synced an Application, and how many
// times in a row without reaching Synced.
type selfHealState struct {
	at time.Time
	n  int
}

// selfHealWait is how long selfHeal waits before its next sync of key, or
// 0 when it may sync now (and then counts this sync): selfHealInterval,
// doubling with each sync in a row that did not reach Synced, at most the
// ReconcilePeriod.
func (c *Controller) selfHealWait(key string, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.selfHeal[key]
	interval := selfHealInterval
	for i := 1; i < st.n && interval < c.opts.ReconcilePeriod; i++ {
		interval *= 2
	}
	interval = min(interval, c.opts.ReconcilePeriod)
	if wait := st.at.Add(interval).Sub(now); st.n > 0 && wait > 0 {
		return wait
	}
	c.selfHeal[key] = selfHealState{at: now, n: st.n + 1}
	return 0
}

// onlyPruning reports whether every OutOfSync resource of cmp is one prune
// would delete.
func onlyPruning(cmp *syncer.Comparison) bool {
	for _, r := range cmp.Resources {
		if r.Status != v1alpha1.SyncStatusCodeSynced && !r.RequiresPruning {
			return false
		}
	}
	return true
}

package apps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"deputy.dev/deputy/apps/appstatus"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// Retries of failed attempts (spec.syncPolicy.retry, Argo CD's semantics):
// an attempt that ends Failed or Error, with retries left, is not the
// operation's end. Its state becomes Running with retryCount incremented,
// nextRetryAt set and a message saying when the retry runs (retryMessage);
// it is persisted (cluster mode) and sent to watchers. After the wait the
// whole sync runs again, from render, with syncer.Request.Previous set to
// the failed attempt's final state (the engine does not run again the hooks
// that succeeded at the same revisions). The wait is cancelled by a new
// sync of the Application (file mode), by the removal or replacement of the
// operation or the deletion of the Application (BeforeRetry; cluster mode
// also at once, Controller.reconcile), and by Shutdown, which leaves the
// persisted state to the next leader: it resumes the retry at nextRetryAt.

// ErrInvalidSync matches the error of Start (both modes) for an Application
// whose spec.syncPolicy.retry or healthTimeout is invalid, or an operation
// whose healthTimeout is: the error names the field and the fix (deputy's
// API answers 422).
var ErrInvalidSync = errors.New("invalid sync")

// validateSync checks what a sync of app with op needs to be valid before it
// is recorded or run (v1alpha1.ApplicationSpec.ValidateSyncPolicy,
// SyncOperation.Validate); the error matches ErrInvalidSync.
func validateSync(app *v1alpha1.Application, op v1alpha1.SyncOperation) error {
	errs := app.Spec.ValidateSyncPolicy()
	errs = append(errs, op.Validate(field.NewPath("operation", "sync"))...)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w of %s: %s", ErrInvalidSync, appKey(app.Namespace, app.Name), errs.ToAggregate().Error())
}

// Why a waiting retry is cancelled without running (the other reasons are
// BeforeRetry's errors).
const (
	retryShutdown = "deputy stopped running operations here (shutdown, or in cluster mode the end of its leadership: the next leader runs the retry at status.operationState.nextRetryAt)"
	retryReplaced = "a new sync of the Application replaced the operation"
)

// retrying is the text retryMessage puts between the failure and the
// attempt; previousAttempt cuts the message there.
const retrying = "; retrying (attempt "

// retryMessage is the message of an operation whose attempt failed with
// failure and that is retried at at: "<failure>; retrying (attempt N of M)
// at <RFC 3339 time>", N counting the first attempt as 1 (Argo CD says
// "... Retrying attempt #N at TIME"). retry is the retry about to run (from
// 1); a negative limit has no M.
func retryMessage(failure string, retry, limit int64, at time.Time) string {
	return fmt.Sprintf("%s%s%s) at %s", failure, retrying, attemptOf(retry+1, limit), at.UTC().Format(time.RFC3339))
}

// attemptOf is "N of M", or "N, no retry limit" for a negative limit.
func attemptOf(attempt, limit int64) string {
	if limit < 0 {
		return fmt.Sprintf("%d, no retry limit", attempt)
	}
	return fmt.Sprintf("%d of %d", attempt, limit+1)
}

// pendingRetry is a failed attempt waiting for its retry.
type pendingRetry struct {
	failed    *v1alpha1.OperationState // the failed attempt's final state
	cancelled chan struct{}            // closed by cancel
	reason    string
}

// cancel ends the wait with reason (the first reason wins); called with
// Operations.mu held.
func (p *pendingRetry) cancel(reason string) {
	if p.reason == "" {
		p.reason = reason
		close(p.cancelled)
	}
}

// replaceRetry cancels a's waiting retry for a new operation, ending the
// watchers of the replaced one with its final state; called with
// Operations.mu held.
func (a *appOperations) replaceRetry() {
	a.retry.cancel(retryReplaced)
	final := a.retry.failed.DeepCopy()
	final.Message += "; retry cancelled: " + retryReplaced
	a.broadcast(v1alpha1.OperationEvent{Type: v1alpha1.OperationEventState, State: final}, true)
	a.retry = nil
}

// retryState is the state of final's operation waiting for its retry, or nil
// when final is not retried: it succeeded, it was a dry run (a check, which
// a retry would not change), the operation was cancelled, or
// spec.syncPolicy.retry of the attempt's Application allows no more.
func (o *Operations) retryState(ctx context.Context, req syncer.Request, final *v1alpha1.OperationState) *v1alpha1.OperationState {
	if final.Phase == v1alpha1.OperationSucceeded || req.Sync.DryRun || ctx.Err() != nil || req.Application.Spec.SyncPolicy == nil {
		return nil
	}
	policy, errs := req.Application.Spec.SyncPolicy.Retry.Parse(field.NewPath("spec", "syncPolicy", "retry"))
	if len(errs) > 0 || !policy.Allows(final.RetryCount) {
		return nil
	}
	n := final.RetryCount + 1
	at := metav1.NewTime(time.Now().Add(policy.Wait(n)))
	w := final.DeepCopy()
	w.Phase, w.RetryCount, w.NextRetryAt, w.FinishedAt = v1alpha1.OperationRunning, n, &at, nil
	w.Message = retryMessage(final.Message, n, policy.Limit, at.Time)
	return w
}

// waitRetry records waiting (the state of final's operation until its
// retry: in memory, for watchers and through the StatusWriter) and waits
// until waiting.NextRetryAt. It returns "" when the retry is due, else why
// it was cancelled.
func (o *Operations) waitRetry(ctx context.Context, key string, gen uint64, final, waiting *v1alpha1.OperationState) string {
	p := &pendingRetry{failed: final.DeepCopy(), cancelled: make(chan struct{})}
	o.mu.Lock()
	a := o.apps[key]
	if a == nil || a.gen != gen {
		o.mu.Unlock()
		return retryReplaced
	}
	a.retry, a.state = p, waiting.DeepCopy()
	appstatus.RecordOutcome(&a.outcome, final, metav1.Now())
	a.broadcast(v1alpha1.OperationEvent{Type: v1alpha1.OperationEventState, State: waiting.DeepCopy()}, false)
	if o.closed {
		p.cancel(retryShutdown)
	}
	o.mu.Unlock()
	o.writeStatus(key, waiting)

	timer := time.NewTimer(time.Until(waiting.NextRetryAt.Time))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	case <-p.cancelled:
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	select {
	case <-ctx.Done():
		p.cancel(retryShutdown)
	default:
	}
	if a.retry == p {
		a.retry = nil
	}
	return p.reason
}

// cancelRetry cancels the Application's waiting retry, if any, for reason
// (cluster mode: its operation was removed or replaced, or it was deleted),
// and reports whether one waited.
func (o *Operations) cancelRetry(namespace, name, reason string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	a := o.apps[appKey(namespace, name)]
	if a == nil || a.retry == nil {
		return false
	}
	a.retry.cancel(reason)
	return true
}

// retryRequest is the request of the next attempt: req with the
// Application and AppProject BeforeRetry returns; "" or why the retry is
// cancelled.
func (o *Operations) retryRequest(req syncer.Request) (syncer.Request, string) {
	if o.beforeRetry == nil {
		return req, ""
	}
	app, project, err := o.beforeRetry(req.Application.Namespace, req.Application.Name)
	switch {
	case err != nil:
		return req, err.Error()
	case app == nil || project == nil:
		return req, "the Application no longer exists"
	}
	req.Application, req.Project = app.DeepCopy(), project.DeepCopy()
	return req, ""
}

// retryStarted is the Running state of the attempt that retries final, from
// waiting (the state while it waited): the operation's start and retries,
// no result yet.
func retryStarted(waiting, final *v1alpha1.OperationState) *v1alpha1.OperationState {
	s := waiting.DeepCopy()
	s.NextRetryAt, s.FinishedAt, s.SyncResult = nil, nil, nil
	failure, _, _ := strings.Cut(final.Message, retrying)
	s.Message = fmt.Sprintf("retry %d running; the previous attempt ended %s: %s", s.RetryCount, final.Phase, failure)
	return s
}

// previousAttempt is the failed attempt's final state as far as the
// persisted state of its waiting retry tells it (cluster mode, a new
// leader): phase Failed, the message before "; retrying", the results.
func previousAttempt(waiting *v1alpha1.OperationState) *v1alpha1.OperationState {
	p := waiting.DeepCopy()
	p.Phase, p.NextRetryAt = v1alpha1.OperationFailed, nil
	p.Message, _, _ = strings.Cut(p.Message, retrying)
	return p
}

// restart makes started the operation's state (a retry's attempt begins)
// and sends it to the watchers.
func (o *Operations) restart(key string, gen uint64, started *v1alpha1.OperationState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if a := o.apps[key]; a != nil && a.gen == gen {
		a.state = started.DeepCopy()
		a.broadcast(v1alpha1.OperationEvent{Type: v1alpha1.OperationEventState, State: started.DeepCopy()}, false)
	}
}

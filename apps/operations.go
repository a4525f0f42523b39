package apps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/apps/appstatus"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// DefaultWorkers is how many operations run at once when OperationsOptions
// leaves Workers unset (the default of config sync.parallelism).
const DefaultWorkers = 8

// AuditMessage is the constant message of the one audit line every operation
// writes when it ends.
const AuditMessage = "sync operation"

// cancelGrace bounds how long Shutdown waits for cancelled operations to
// return: a Runner honours its context, but a stuck one must not block exit.
const cancelGrace = 5 * time.Second

// statusWriteTimeout bounds one StatusWriter call.
const statusWriteTimeout = 10 * time.Second

// StatusWriter persists an Application's operation state outside the process:
// the seam for cluster mode, where the state goes to the Application's status
// subresource. Operations always keeps the latest state in memory and serves
// it (file mode needs nothing else); a StatusWriter is called in addition,
// with the Running state when an operation (or a retry's attempt) starts, a
// failed attempt's state waiting for its retry (Running, NextRetryAt set),
// and the final state before the operation counts as finished, never
// concurrently for one Application.
// An error is logged; the operation goes on.
type StatusWriter interface {
	WriteOperationState(ctx context.Context, namespace, name string, state *v1alpha1.OperationState) error
}

// OperationsOptions configure Operations.
type OperationsOptions struct {
	// Workers bounds how many operations (of different Applications) run at
	// once; the others wait, Running, for a free worker. 0 means
	// DefaultWorkers.
	Workers int
	// Logger receives the audit line of every operation and engine faults.
	Logger *slog.Logger
	// StatusWriter, if set, persists every state change (cluster mode).
	StatusWriter StatusWriter
	// OnFinished, if set, is called after an operation has ended and its
	// Application is free for the next one (cluster mode: look at the
	// Application again, an operation may have been recorded meanwhile).
	OnFinished func(namespace, name string)
	// BeforeRetry, if set, is called before each retry of a failed attempt
	// (spec.syncPolicy.retry) with the Application's namespace and name: it
	// returns the Application and its AppProject as they are now, which the
	// retry runs with, or an error that cancels the retry (the Application
	// was deleted, its operation removed or replaced, its project is not
	// usable); the operation then ends in the failed attempt's phase, its
	// message saying why the retry was cancelled. nil retries with the
	// Application of the failed attempt.
	BeforeRetry func(namespace, name string) (*v1alpha1.Application, *v1alpha1.AppProject, error)
	// Metrics, if set, counts every attempt's end (NewMetrics).
	Metrics *Metrics
}

// Operations is the operations queue: at most one operation per Application
// at a time, at most Workers at once in total, the latest OperationState of
// every Application in memory, and progress events for watchers. It runs each
// operation with a Runner (the Engine). Safe for concurrent use.
type Operations struct {
	runner syncer.Runner
	log    *slog.Logger
	writer StatusWriter
	// onFinished, beforeRetry: see OperationsOptions.
	onFinished  func(namespace, name string)
	beforeRetry func(namespace, name string) (*v1alpha1.Application, *v1alpha1.AppProject, error)
	metrics     *Metrics
	slots       chan struct{}
	workers     int

	base   context.Context // parent of every operation; cancelled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	apps   map[string]*appOperations // namespace/name
}

// appOperations is the queue's record of one Application.
type appOperations struct {
	state    *v1alpha1.OperationState // latest; owned by Operations, copied out
	running  bool
	gen      uint64 // operation counter; progress of an earlier operation is ignored
	watchers map[*watcher]struct{}
	// retry is set while a failed attempt waits for its retry.
	retry *pendingRetry
	// abort cancels the running operation's context (Cancel); nil when
	// none runs.
	abort context.CancelCauseFunc
	// outcome holds status.health and status.resources as the attempts
	// left them (recordOutcome).
	outcome v1alpha1.ApplicationStatus
}

// NewOperations returns an operations queue that runs operations with runner.
func NewOperations(runner syncer.Runner, opts OperationsOptions) *Operations {
	workers := opts.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, cancel := context.WithCancel(context.Background())
	return &Operations{
		runner: runner, log: log, writer: opts.StatusWriter, onFinished: opts.OnFinished,
		beforeRetry: opts.BeforeRetry, metrics: opts.Metrics,
		slots: make(chan struct{}, workers), workers: workers,
		base: base, cancel: cancel,
		apps: map[string]*appOperations{},
	}
}

// Start queues a sync of app governed by project (either may be read by the
// engine; Start passes it copies) and returns at once with the operation's
// Running state. The operation runs in the background, outliving ctx (whose
// values it keeps) until it ends or Shutdown cancels it; a failed attempt
// is retried as app's spec.syncPolicy.retry says (see RetryStrategy); when
// the operation ends, its final state is kept as the Application's latest
// and one audit line is written. A Start while a failed attempt of the
// Application waits for its retry replaces that operation: the retry is
// cancelled.
//
// Errors: ErrOperationInProgress while an operation of the same Application
// runs, ErrShuttingDown after Shutdown, ErrInvalidSync for an invalid
// spec.syncPolicy or operation (naming the field), ctx's error when ctx has
// ended, and an error for a nil app or project (look the project up first:
// the deputy.dev AppProject named spec.project in the Application's
// namespace).
func (o *Operations) Start(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, op v1alpha1.SyncOperation, initiatedBy v1alpha1.InitiatedBy) (*v1alpha1.OperationState, error) {
	return o.start(ctx, app, project, op, initiatedBy, nil)
}

// continuation is how an operation recorded earlier goes on when a new
// leader runs it (cluster mode): the retries it made, and the persisted
// state of a failed attempt that waits for its retry (nil: run now).
type continuation struct {
	retryCount int64
	waiting    *v1alpha1.OperationState
}

// start is Start; cont continues an operation another leader began.
func (o *Operations) start(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, op v1alpha1.SyncOperation, initiatedBy v1alpha1.InitiatedBy, cont *continuation) (*v1alpha1.OperationState, error) {
	if app == nil || project == nil {
		return nil, errors.New("failed to start a sync: an Application and its AppProject are required")
	}
	if err := validateSync(app, op); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := appKey(app.Namespace, app.Name)
	opCopy := op
	state := &v1alpha1.OperationState{
		Operation: v1alpha1.Operation{Sync: &opCopy, InitiatedBy: initiatedBy},
		Phase:     v1alpha1.OperationRunning,
		StartedAt: metav1.Now(),
		// The generation that recorded the operation (cluster mode): see
		// OperationState.ObservedGeneration.
		ObservedGeneration: app.Generation,
	}
	if cont != nil {
		state.RetryCount = cont.retryCount
		if cont.waiting != nil {
			state = cont.waiting.DeepCopy()
		}
	}
	req := syncer.Request{Application: app.DeepCopy(), Project: project.DeepCopy(), Sync: op, InitiatedBy: initiatedBy}

	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		cancel(nil)
		return nil, ErrShuttingDown
	}
	a := o.apps[key]
	if a == nil {
		a = &appOperations{}
		o.apps[key] = a
	}
	if a.running {
		if cont != nil || a.retry == nil {
			o.mu.Unlock()
			cancel(nil)
			return nil, ErrOperationInProgress
		}
		a.replaceRetry()
	}
	a.running, a.state, a.gen, a.abort = true, state, a.gen+1, cancel
	a.watchers = map[*watcher]struct{}{}
	gen := a.gen
	out := state.DeepCopy()
	o.wg.Add(1)
	o.mu.Unlock()

	stop := context.AfterFunc(o.base, func() { cancel(nil) })
	go func() {
		defer o.wg.Done()
		defer cancel(nil)
		defer stop()
		o.run(runCtx, key, gen, req, state.DeepCopy(), cont != nil && cont.waiting != nil)
	}()
	return out, nil
}

// run runs the operation's attempts and records its end: each attempt
// waits for a worker and runs; a failed one with retries left waits for its
// retry (waitRetry), then the next attempt runs with the Application as
// BeforeRetry returns it and Request.Previous set. resumed: started is the
// persisted state of a failed attempt waiting for its retry.
func (o *Operations) run(ctx context.Context, key string, gen uint64, req syncer.Request, started *v1alpha1.OperationState, resumed bool) {
	var final, waiting *v1alpha1.OperationState
	if resumed {
		waiting, final = started, previousAttempt(started)
	} else {
		o.writeStatus(key, started)
	}
	persist := true
	for {
		reason := ""
		if waiting == nil {
			final = o.attempt(ctx, key, gen, req, started)
			if waiting = o.retryState(ctx, req, final); waiting == nil {
				break
			}
			// Not worth the wait when the retry could not run anyway.
			_, reason = o.retryRequest(req)
		}
		if reason == "" {
			reason = o.waitRetry(ctx, key, gen, final, waiting)
		}
		if reason == "" {
			req, reason = o.retryRequest(req)
		}
		if reason != "" {
			final = final.DeepCopy()
			final.Message += "; retry cancelled: " + reason
			// Cancelled by a shutdown, the persisted state stays for the
			// next leader; replaced, the next operation's state is written.
			persist = reason != retryShutdown && reason != retryReplaced
			break
		}
		req.Previous = final.DeepCopy()
		started = retryStarted(waiting, final)
		o.restart(key, gen, started)
		o.writeStatus(key, started)
		waiting = nil
	}
	var cancelled operationCancelled
	if errors.As(context.Cause(ctx), &cancelled) && final.Phase != v1alpha1.OperationSucceeded {
		final = final.DeepCopy()
		if final.Phase == v1alpha1.OperationRunning {
			final.Phase = v1alpha1.OperationError
		}
		final.Message = fmt.Sprintf("operation cancelled: %s; %s", cancelled.reason, final.Message)
		persist = true
	}
	o.finish(key, gen, req, final, persist)
}

// operationCancelled is the cause of a running operation's context that
// Cancel ended.
type operationCancelled struct{ reason string }

func (e operationCancelled) Error() string { return "operation cancelled: " + e.reason }

// Cancel cancels the Application's running operation, if any, for reason
// (cluster mode: the Application was deleted, or is being deleted): a
// waiting retry is cancelled, a running attempt's context ends (the engine
// stops at its next step; what it applied stays) and the operation ends in
// Error, its message starting "operation cancelled: <reason>". It reports
// whether an operation ran. Cancel returns at once: Running stays true
// until the operation has ended.
func (o *Operations) Cancel(namespace, name, reason string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	a := o.apps[appKey(namespace, name)]
	if a == nil || !a.running || a.abort == nil {
		return false
	}
	if a.retry != nil {
		a.retry.cancel(reason)
	}
	a.abort(operationCancelled{reason: reason})
	return true
}

// attempt waits for a worker, runs one attempt and returns its normalised
// final state (normalizeFinal), counted in the metrics.
func (o *Operations) attempt(ctx context.Context, key string, gen uint64, req syncer.Request, started *v1alpha1.OperationState) *v1alpha1.OperationState {
	var final *v1alpha1.OperationState
	select {
	case o.slots <- struct{}{}:
	default:
		o.update(key, gen, func(s *v1alpha1.OperationState) {
			s.Message = fmt.Sprintf("waiting for a free sync worker (all %d busy; sync.parallelism)", o.workers)
		})
		select {
		case o.slots <- struct{}{}:
			o.update(key, gen, func(s *v1alpha1.OperationState) { s.Message = "" })
		case <-ctx.Done():
			final = started.DeepCopy()
			final.Phase, final.Message = v1alpha1.OperationError, "operation cancelled before it started: deputy is shutting down"
		}
	}
	begin := time.Now()
	if final == nil {
		func() {
			defer func() { <-o.slots }()
			final = o.runSafely(ctx, req, o.progress(key, gen))
		}()
	}
	o.mu.Lock()
	var seen *v1alpha1.OperationState
	if a := o.apps[key]; a != nil && a.gen == gen {
		seen = a.state.DeepCopy()
	}
	o.mu.Unlock()
	final = normalizeFinal(final, started, seen)
	o.metrics.attemptEnded(req.Application, final, time.Since(begin))
	return final
}

// runSafely calls the Runner and turns a panic (a bug: the contract says it
// never panics) into an Error state instead of a crashed server.
func (o *Operations) runSafely(ctx context.Context, req syncer.Request, progress syncer.Progress) (st *v1alpha1.OperationState) {
	defer func() {
		if v := recover(); v != nil {
			o.log.Error("sync engine panicked", "application", appKey(req.Application.Namespace, req.Application.Name),
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			st = &v1alpha1.OperationState{Phase: v1alpha1.OperationError, Message: "the sync engine failed unexpectedly; see deputy's log"}
		}
	}()
	return o.runner.Run(ctx, req, progress)
}

// update changes the current operation's state (if it is still gen) and
// sends it to the watchers.
func (o *Operations) update(key string, gen uint64, f func(*v1alpha1.OperationState)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a := o.apps[key]
	if a == nil || !a.running || a.gen != gen {
		return
	}
	f(a.state)
	a.broadcast(v1alpha1.OperationEvent{Type: v1alpha1.OperationEventState, State: a.state.DeepCopy()}, false)
}

// progress is the Progress the Runner gets: it records what the engine
// reports and fans it out, without blocking (watchers have their own queues).
func (o *Operations) progress(key string, gen uint64) syncer.Progress {
	return func(state *v1alpha1.OperationState, resource *v1alpha1.ResourceResult) {
		o.mu.Lock()
		defer o.mu.Unlock()
		a := o.apps[key]
		if a == nil || !a.running || a.gen != gen {
			return // reported after the operation ended: a Runner bug, ignored
		}
		if state != nil {
			s := state.DeepCopy()
			inherit(s, a.state)
			a.state = s
			// The operation ends when Run returns; a final phase reported
			// earlier is recorded but not announced, so that the last state
			// a watcher sees is the one Run returned.
			if s.Phase == v1alpha1.OperationRunning {
				a.broadcast(v1alpha1.OperationEvent{Type: v1alpha1.OperationEventState, State: s.DeepCopy()}, false)
			}
		}
		if resource != nil {
			r := resource.DeepCopy()
			upsertResource(a.state, r)
			a.broadcast(v1alpha1.OperationEvent{Type: v1alpha1.OperationEventResource, Resource: r}, false)
		}
	}
}

// inherit fills what the engine left empty in s from the queue's record prev:
// the operation, its start, its retries, and the resource results seen so
// far.
func inherit(s, prev *v1alpha1.OperationState) {
	if s.Operation.Sync == nil {
		s.Operation = *prev.Operation.DeepCopy()
	}
	if s.StartedAt.IsZero() {
		s.StartedAt = prev.StartedAt
	}
	if s.ObservedGeneration == 0 {
		s.ObservedGeneration = prev.ObservedGeneration
	}
	if s.RetryCount == 0 {
		s.RetryCount = prev.RetryCount
	}
	if s.Phase == "" {
		s.Phase = v1alpha1.OperationRunning
	}
	if (s.SyncResult == nil || len(s.SyncResult.Resources) == 0) && prev.SyncResult != nil {
		revision, revisions := "", []string(nil)
		if s.SyncResult != nil {
			revision, revisions = s.SyncResult.Revision, s.SyncResult.Revisions
		}
		s.SyncResult = prev.SyncResult.DeepCopy()
		if revision != "" {
			s.SyncResult.Revision = revision
		}
		if len(revisions) > 0 {
			s.SyncResult.Revisions = slices.Clone(revisions)
		}
	}
}

func sameResource(a, b *v1alpha1.ResourceResult) bool {
	return a.Group == b.Group && a.Kind == b.Kind && a.Namespace == b.Namespace && a.Name == b.Name
}

func upsertResource(s *v1alpha1.OperationState, r *v1alpha1.ResourceResult) {
	if s.SyncResult == nil {
		s.SyncResult = &v1alpha1.SyncOperationResult{}
	}
	for i, have := range s.SyncResult.Resources {
		if sameResource(have, r) {
			s.SyncResult.Resources[i] = r
			return
		}
	}
	s.SyncResult.Resources = append(s.SyncResult.Resources, r)
}

// finish persists the final state (unless persist is false), publishes it
// to the watchers (closing their streams), frees the Application for the
// next operation, and writes the audit line.
func (o *Operations) finish(key string, gen uint64, req syncer.Request, final *v1alpha1.OperationState, persist bool) {
	// Persist before the Application is free again, so that the next
	// operation's Running state can never be overwritten by this one's end.
	if persist {
		o.writeStatus(key, final)
	}
	o.mu.Lock()
	if a := o.apps[key]; a != nil && a.gen == gen {
		a.state = final
		a.running, a.abort = false, nil
		appstatus.RecordOutcome(&a.outcome, final, metav1.Now())
		a.broadcast(v1alpha1.OperationEvent{Type: v1alpha1.OperationEventState, State: final.DeepCopy()}, true)
		a.watchers = nil
	}
	o.mu.Unlock()
	o.auditLine(req, final)
	if o.onFinished != nil {
		o.onFinished(req.Application.Namespace, req.Application.Name)
	}
}

// normalizeFinal enforces the Runner contract on what Run returned: a state
// (not nil), a final phase, the operation and its start filled, a finish time,
// and the resource results reported through progress when the engine's final
// state carries none.
func normalizeFinal(final, started, seen *v1alpha1.OperationState) *v1alpha1.OperationState {
	if final == nil {
		final = &v1alpha1.OperationState{Phase: v1alpha1.OperationError, Message: "the sync engine returned no result"}
	} else {
		final = final.DeepCopy()
	}
	switch final.Phase {
	case v1alpha1.OperationSucceeded, v1alpha1.OperationFailed, v1alpha1.OperationError:
	default:
		msg := fmt.Sprintf("the sync engine ended the operation in phase %q", final.Phase)
		if final.Message != "" {
			msg += ": " + final.Message
		}
		final.Phase, final.Message = v1alpha1.OperationError, msg
	}
	prev := started
	if seen != nil {
		prev = seen
	}
	phase := final.Phase
	inherit(final, prev)
	final.Phase = phase
	if final.StartedAt.IsZero() {
		final.StartedAt = started.StartedAt
	}
	if final.FinishedAt == nil {
		now := metav1.Now()
		final.FinishedAt = &now
	}
	return final
}

// Status returns a copy of the latest OperationState of the Application (the
// running operation's, or the last one's), and false when it has had none
// since deputy started.
func (o *Operations) Status(namespace, name string) (*v1alpha1.OperationState, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a := o.apps[appKey(namespace, name)]
	if a == nil || a.state == nil {
		return nil, false
	}
	return a.state.DeepCopy(), true
}

// ApplicationStatus is the status deputy serves for an Application: the latest
// OperationState, a sync status as of that operation (v1alpha1.SyncStatusAfter;
// Unknown when it tells nothing: deputy does not compare live state between
// operations yet), and status.health and status.resources as the last
// attempt that assessed them left them (see recordOutcome).
func (o *Operations) ApplicationStatus(namespace, name string) v1alpha1.ApplicationStatus {
	st := v1alpha1.ApplicationStatus{Sync: v1alpha1.SyncStatus{Status: v1alpha1.SyncStatusCodeUnknown}}
	o.mu.Lock()
	defer o.mu.Unlock()
	a := o.apps[appKey(namespace, name)]
	if a == nil || a.state == nil {
		return st
	}
	st.OperationState = a.state.DeepCopy()
	if sync, ok := v1alpha1.SyncStatusAfter(st.OperationState); ok {
		st.Sync = sync
	}
	out := a.outcome.DeepCopy()
	st.Health, st.Resources = out.Health, out.Resources
	return st
}

// Running reports whether an operation of the Application runs.
func (o *Operations) Running(namespace, name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	a := o.apps[appKey(namespace, name)]
	return a != nil && a.running
}

// Shutdown stops accepting operations, cancels the retries that wait (in
// cluster mode their persisted state stays for the next leader) and waits
// for the running operations to end. When ctx ends first, it cancels them
// and waits up to a few more seconds for their Runners to return.
//
// Errors: ctx's error when operations had to be cancelled; an error naming
// the stuck operations' count when they did not return after cancellation.
func (o *Operations) Shutdown(ctx context.Context) error {
	o.mu.Lock()
	o.closed = true
	for _, a := range o.apps {
		if a.retry != nil {
			a.retry.cancel(retryShutdown)
		}
	}
	o.mu.Unlock()
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
		o.cancel()
		return nil
	case <-ctx.Done():
	}
	o.cancel()
	select {
	case <-done:
		return fmt.Errorf("running sync operations were cancelled: %w", ctx.Err())
	case <-time.After(cancelGrace):
		return fmt.Errorf("running sync operations did not stop within %s of being cancelled", cancelGrace)
	}
}

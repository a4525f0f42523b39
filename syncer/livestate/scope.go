package livestate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// errIdle is why an idle scope was stopped (no List waits for it).
var errIdle = errors.New("livestate: scope stopped: idle")

// entry is one scope: its informer's life from start to stop.
type entry struct {
	scope Scope
	log   logr.Logger

	// ctx is the scope's life: NewClient's and the informer's context;
	// cancel stops both (idempotent).
	ctx    context.Context
	cancel context.CancelFunc

	// started is closed (under Cache.mu) once inf is set and running.
	started chan struct{}
	inf     cache.SharedIndexInformer

	// failed is closed (under Cache.mu, once) when the scope is stopped
	// and forgotten; err, written before, says why.
	failed chan struct{}
	err    error

	// Guarded by Cache.mu: the Lists using the scope now, and the last
	// time one began or ended.
	inUse    int
	lastUsed time.Time
}

func newEntry(s Scope, log logr.Logger) *entry {
	log = log.WithValues("scope", s.String())
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	return &entry{scope: s, log: log, ctx: ctx, cancel: cancel, started: make(chan struct{}), failed: make(chan struct{})}
}

// isFailed reports whether e was forgotten.
func (e *entry) isFailed() bool {
	select {
	case <-e.failed:
		return true
	default:
		return false
	}
}

// forgetLocked stops e (cancel its context: NewClient and the informer
// return), removes it from the scopes if it is still there, and fails its
// waiters with err. c.mu must be held; it never blocks, so that an
// informer's own goroutine (the watch error handler) may call it.
func (c *Cache) forgetLocked(e *entry, err error) {
	if c.scopes[e.scope] == e {
		delete(c.scopes, e.scope)
	}
	if !e.isFailed() {
		e.err = err
		close(e.failed)
	}
	e.cancel()
}

// forget is forgetLocked taking c.mu.
func (c *Cache) forget(e *entry, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(e, err)
}

// runScope is e's goroutine: it makes the scope's client and informer and
// runs the informer until the scope is stopped.
func (c *Cache) runScope(e *entry) {
	defer c.wg.Done()
	defer e.cancel()
	inf, err := c.newInformer(e)
	if err != nil {
		c.forget(e, err)
		return
	}
	c.mu.Lock()
	if e.isFailed() {
		c.mu.Unlock()
		return
	}
	e.inf = inf
	close(e.started)
	c.mu.Unlock()
	e.log.V(1).Info("livestate: starting a scope")
	inf.RunWithContext(e.ctx)
	e.log.V(1).Info("livestate: scope stopped")
}

// newInformer makes e's client and informer (not started): metadata only,
// no resync, the watch error handler and, with OnChange, the event handler.
func (c *Cache) newInformer(e *entry) (cache.SharedIndexInformer, error) {
	ctx, cancel := context.WithTimeout(e.ctx, c.opts.SyncTimeout)
	defer cancel()
	cl, err := c.opts.NewClient(ctx, e.scope)
	if err != nil {
		return nil, fmt.Errorf("livestate: a client for %s: %w", e.scope, err)
	}
	if cl == nil {
		return nil, fmt.Errorf("livestate: a client for %s: NewClient returned none", e.scope)
	}
	inf := metadatainformer.NewFilteredMetadataInformer(cl, e.scope.GVR, e.scope.Namespace, 0, cache.Indexers{}, nil).Informer()
	if err := inf.SetWatchErrorHandlerWithContext(c.watchError(e, inf)); err != nil {
		return nil, fmt.Errorf("livestate: %s: %w", e.scope, err)
	}
	if c.opts.OnChange != nil {
		zero := time.Duration(0)
		if _, err := inf.AddEventHandlerWithOptions(c.handler(e.scope), cache.HandlerOptions{Logger: &e.log, ResyncPeriod: &zero}); err != nil {
			return nil, fmt.Errorf("livestate: %s: %w", e.scope, err)
		}
	}
	return inf, nil
}

// watchError is the scope's list/watch error handler: before the first
// list completes any failure, afterwards Forbidden, Unauthorized and
// NotFound (the resource is gone), stop and forget the scope with the
// apiserver's error; other failures are retried by the informer.
func (c *Cache) watchError(e *entry, inf cache.SharedIndexInformer) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		if e.ctx.Err() != nil {
			return // stopping
		}
		apiErr := apiError(err)
		synced := inf.HasSynced()
		if synced && !apierrors.IsForbidden(apiErr) && !apierrors.IsUnauthorized(apiErr) && !apierrors.IsNotFound(apiErr) {
			e.log.V(1).Info("livestate: watch failed, retrying", "err", err.Error())
			return
		}
		e.log.V(1).Info("livestate: list/watch failed, scope forgotten", "synced", synced, "err", err.Error())
		c.forget(e, fmt.Errorf("livestate: list/watch %s: %w", e.scope, apiErr))
	}
}

// apiError is the apiserver's status error inside err (the reflector wraps
// it), or err.
func apiError(err error) error {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		if se, ok := st.(error); ok {
			return se
		}
	}
	return err
}

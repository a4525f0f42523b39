package apps

import (
	"context"
	"reflect"
	"time"

	"deputy.dev/deputy/policy/v1alpha1"
)

// pendingWatchTimeout bounds how long a watch waits for the informer to show
// an operation requested through this replica.
const pendingWatchTimeout = 30 * time.Second

// appSub is one watcher's wake-up signal for one Application.
type appSub struct{ wake chan struct{} }

func (s *appSub) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Watch streams the progress of the Application's current operation until it
// ends, as Operations.Watch does. On the leader, while the operation
// runs here, it is the queue's own live stream; elsewhere (and on a leader
// that loses the Lease mid-operation, whose cancelled run is not the
// operation's end) it follows the Application's status through the
// informer: a resource event for each new or changed resource result, a
// state event for each change of the state, until no operation is recorded
// or running. An operation requested through this replica counts from the
// request on, even before the informer shows it, and states of earlier
// operations are not sent.
func (c *Controller) Watch(ctx context.Context, namespace, name string) <-chan v1alpha1.OperationEvent {
	key := appKey(namespace, name)
	sub := &appSub{wake: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.subs[key] == nil {
		c.subs[key] = map[*appSub]struct{}{}
	}
	c.subs[key][sub] = struct{}{}
	t := c.term
	minGen := int64(0)
	if p, ok := c.pending[key]; ok {
		minGen = p.generation
	}
	c.mu.Unlock()

	var live <-chan v1alpha1.OperationEvent
	liveCtx, stopLive := context.WithCancel(ctx)
	if ops := c.ops.Load(); ops != nil && t != nil && ops.Running(namespace, name) {
		live = ops.Watch(liveCtx, namespace, name)
	}

	out := make(chan v1alpha1.OperationEvent)
	go func() {
		defer close(out)
		defer stopLive()
		defer func() {
			c.mu.Lock()
			delete(c.subs[key], sub)
			if len(c.subs[key]) == 0 {
				delete(c.subs, key)
			}
			c.mu.Unlock()
		}()
		w := &statusFollower{sent: map[string]*v1alpha1.ResourceResult{}, minGen: minGen}
		send := func(ev v1alpha1.OperationEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		if live != nil {
			ended := false
			for ev := range live {
				if ev.Type == v1alpha1.OperationEventState && ev.State.Phase != v1alpha1.OperationRunning && t.ending() {
					// Cancelled because this replica stopped leading: not the
					// operation's end (the next leader runs it again).
					break
				}
				w.remember(ev)
				if !send(ev) {
					return
				}
				if ev.Type == v1alpha1.OperationEventState && ev.State.Phase != v1alpha1.OperationRunning {
					ended = true
				}
			}
			stopLive()
			if ended {
				return
			}
		}
		timeout := time.NewTimer(pendingWatchTimeout)
		defer timeout.Stop()
		expired := false
		for {
			app := c.get(key)
			if app == nil {
				return
			}
			for _, ev := range w.events(app) {
				if !send(ev) {
					return
				}
			}
			c.mu.Lock()
			_, pending := c.pending[key]
			c.mu.Unlock()
			st := app.Status.OperationState
			if (!pending || expired) && app.Operation == nil && (st == nil || st.Phase != v1alpha1.OperationRunning) {
				return
			}
			select {
			case <-sub.wake:
			case <-timeout.C:
				expired = true
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// statusFollower turns successive Application statuses into events.
type statusFollower struct {
	sent      map[string]*v1alpha1.ResourceResult
	lastState *v1alpha1.OperationState
	minGen    int64 // states of operations recorded before this are old
}

func resourceID(r *v1alpha1.ResourceResult) string {
	return r.Group + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name
}

// remember notes an event already sent (from the live stream).
func (f *statusFollower) remember(ev v1alpha1.OperationEvent) {
	switch {
	case ev.Resource != nil:
		f.sent[resourceID(ev.Resource)] = ev.Resource
	case ev.State != nil:
		f.lastState = ev.State
	}
}

func (f *statusFollower) events(app *v1alpha1.Application) []v1alpha1.OperationEvent {
	st := app.Status.OperationState
	if st == nil || st.ObservedGeneration < f.minGen {
		return nil
	}
	var events []v1alpha1.OperationEvent
	if st.SyncResult != nil {
		for _, r := range st.SyncResult.Resources {
			if prev := f.sent[resourceID(r)]; prev == nil || !reflect.DeepEqual(prev, r) {
				f.sent[resourceID(r)] = r
				events = append(events, v1alpha1.OperationEvent{Type: v1alpha1.OperationEventResource, Resource: r.DeepCopy()})
			}
		}
	}
	if f.lastState == nil || !sameState(f.lastState, st) {
		f.lastState = st
		events = append(events, v1alpha1.OperationEvent{Type: v1alpha1.OperationEventState, State: st.DeepCopy()})
	}
	return events
}

func sameState(a, b *v1alpha1.OperationState) bool {
	return a.Phase == b.Phase && a.Message == b.Message && a.Identity == b.Identity &&
		a.ObservedGeneration == b.ObservedGeneration && a.StartedAt.Equal(&b.StartedAt) &&
		reflect.DeepEqual(a.FinishedAt, b.FinishedAt) && a.RetryCount == b.RetryCount && reflect.DeepEqual(a.NextRetryAt, b.NextRetryAt)
}

package syncer

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
// ends, as syncer.Operations.Watch does. On the leader, while the operation
// runs here, it is the queue's own live stream; elsewhere it follows the
// Application's status through the informer: a resource event for each new
// or changed resource result, a state event for each change of the state,
// and it ends once no operation is recorded or running (an operation
// requested through this replica counts from the request on, even before
// the informer shows it).
func (c *Controller) Watch(ctx context.Context, namespace, name string) <-chan Event {
	if ops := c.ops.Load(); ops != nil && ops.Running(namespace, name) {
		return ops.Watch(ctx, namespace, name)
	}
	key := appKey(namespace, name)
	sub := &appSub{wake: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.subs[key] == nil {
		c.subs[key] = map[*appSub]struct{}{}
	}
	c.subs[key][sub] = struct{}{}
	c.mu.Unlock()

	out := make(chan Event)
	go func() {
		defer close(out)
		defer func() {
			c.mu.Lock()
			delete(c.subs[key], sub)
			if len(c.subs[key]) == 0 {
				delete(c.subs, key)
			}
			c.mu.Unlock()
		}()
		timeout := time.NewTimer(pendingWatchTimeout)
		defer timeout.Stop()
		sent := map[string]*v1alpha1.ResourceResult{}
		var lastState *v1alpha1.OperationState
		expired := false
		for {
			app := c.get(key)
			if app == nil {
				return
			}
			var events []Event
			st := app.Status.OperationState
			if st != nil {
				if st.SyncResult != nil {
					for _, r := range st.SyncResult.Resources {
						id := r.Group + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name
						if prev := sent[id]; prev == nil || !reflect.DeepEqual(prev, r) {
							sent[id] = r
							events = append(events, Event{Type: EventResource, Resource: r.DeepCopy()})
						}
					}
				}
				if lastState == nil || !sameState(lastState, st) {
					lastState = st
					events = append(events, Event{Type: EventState, State: st.DeepCopy()})
				}
			}
			for _, ev := range events {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			c.mu.Lock()
			_, pending := c.pending[key]
			c.mu.Unlock()
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

func sameState(a, b *v1alpha1.OperationState) bool {
	return a.Phase == b.Phase && a.Message == b.Message && a.Identity == b.Identity &&
		a.ObservedGeneration == b.ObservedGeneration && a.StartedAt.Equal(&b.StartedAt) &&
		reflect.DeepEqual(a.FinishedAt, b.FinishedAt)
}

package apps

import (
	"context"
	"sync"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Watch streams the progress of the Application's current operation until it
// ends: first what is already known (each resource result so far, then the
// current state), then every event as it happens, the last being the final
// state; then the channel is closed. Without a running operation it delivers
// the latest state (if any) and closes. A caller that stops early cancels ctx;
// the channel is then closed too. Events are never dropped: each watcher has
// its own queue, so a slow reader does not slow the operation.
func (o *Operations) Watch(ctx context.Context, namespace, name string) <-chan v1alpha1.OperationEvent {
	out := make(chan v1alpha1.OperationEvent)
	w := &watcher{wake: make(chan struct{}, 1)}
	key := appKey(namespace, name)
	o.mu.Lock()
	a := o.apps[key]
	if a != nil && a.state != nil {
		if a.state.SyncResult != nil {
			for _, r := range a.state.SyncResult.Resources {
				w.queue = append(w.queue, v1alpha1.OperationEvent{Type: v1alpha1.OperationEventResource, Resource: r.DeepCopy()})
			}
		}
		w.queue = append(w.queue, v1alpha1.OperationEvent{Type: v1alpha1.OperationEventState, State: a.state.DeepCopy()})
	}
	if a != nil && a.running {
		a.watchers[w] = struct{}{}
	} else {
		w.done = true
	}
	o.mu.Unlock()

	go func() {
		defer close(out)
		defer o.unwatch(key, w)
		for {
			w.mu.Lock()
			batch, done := w.queue, w.done
			w.queue = nil
			w.mu.Unlock()
			for _, ev := range batch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			if done {
				w.mu.Lock()
				empty := len(w.queue) == 0
				w.mu.Unlock()
				if empty {
					return
				}
				continue
			}
			select {
			case <-w.wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (o *Operations) unwatch(key string, w *watcher) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if a := o.apps[key]; a != nil && a.watchers != nil {
		delete(a.watchers, w)
	}
}

// watcher is one Watch call's unbounded queue (bounded in practice by the
// operation's resource count).
type watcher struct {
	mu    sync.Mutex
	queue []v1alpha1.OperationEvent
	done  bool // the final state is queued
	wake  chan struct{}
}

func (w *watcher) push(ev v1alpha1.OperationEvent, final bool) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	if final {
		w.done = true
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// broadcast queues ev for every watcher; called with Operations.mu held.
func (a *appOperations) broadcast(ev v1alpha1.OperationEvent, final bool) {
	for w := range a.watchers {
		w.push(ev, final)
	}
}

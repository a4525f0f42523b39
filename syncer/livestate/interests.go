package livestate

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Place is a resource and a namespace ("" for a cluster-scoped resource).
type Place struct {
	GVR       schema.GroupVersionResource
	Namespace string
}

// Interests hold, per tracking value (an Application), the scopes its last
// look read, so that a change of an object carrying that value counts for
// it only when seen in one of them: whoever may write an object can write
// any tracking value on it. Entries not refreshed within DefaultIdleTimeout
// (the Application deleted, or no longer looked at) are dropped. The zero
// value is ready; it is safe for concurrent use.
type Interests struct {
	mu    sync.Mutex
	items map[string]watched
	swept time.Time
}

type watched struct {
	scopes map[Scope]bool
	at     time.Time
}

// Set records places (on server, as identity) as tracking's scopes at
// now, replacing the previous ones.
func (w *Interests) Set(tracking, server, identity string, places []Place, now time.Time) {
	scopes := make(map[Scope]bool, len(places))
	for _, p := range places {
		scopes[Scope{Server: server, Identity: identity, GVR: p.GVR, Namespace: p.Namespace}] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.items == nil {
		w.items = map[string]watched{}
	}
	if now.Sub(w.swept) > DefaultIdleTimeout/4 {
		for k, v := range w.items {
			if now.Sub(v.at) > DefaultIdleTimeout {
				delete(w.items, k)
			}
		}
		w.swept = now
	}
	w.items[tracking] = watched{scopes: scopes, at: now}
}

// Has reports whether s is one of tracking's scopes.
func (w *Interests) Has(tracking string, s Scope) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.items[tracking].scopes[s]
}

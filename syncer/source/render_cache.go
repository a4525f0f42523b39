package source

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/lru"
)

// MaxCachedRenders and MaxCachedObjects bound a RenderCache: renders and
// the objects they hold (about 2 KiB each decoded: some 200 MiB at most).
const (
	MaxCachedRenders = 4096
	MaxCachedObjects = 100_000
)

// RenderCache keeps renders by a key the caller chooses (the sync engine's
// drift detection: an Application and its revisions, as it looks at every
// Application every reconcile period and on every change of a tracked
// object, and rendering each time would start a render worker each time).
// It holds at most MaxCachedRenders renders and MaxCachedObjects objects in
// all (least recently used go first; a render larger than that is not
// kept) and hands out deep copies. It is safe for concurrent use.
type RenderCache struct {
	mu      sync.Mutex // guards objects (lru has its own lock)
	lru     *lru.Cache
	objects int
}

// NewRenderCache returns an empty RenderCache.
func NewRenderCache() *RenderCache {
	c := &RenderCache{}
	c.lru = lru.NewWithEvictionFunc(MaxCachedRenders, func(_ lru.Key, v any) {
		c.objects -= len(v.([]*unstructured.Unstructured)) // called under mu: every Add and RemoveOldest is
	})
	return c
}

// Get returns a copy of the render cached under key ("" is never cached).
func (c *RenderCache) Get(key string) ([]*unstructured.Unstructured, bool) {
	if key == "" {
		return nil, false
	}
	v, ok := c.lru.Get(key)
	if !ok {
		return nil, false
	}
	return deepCopies(v.([]*unstructured.Unstructured)), true
}

// Put caches a copy of objs under key, unless key is "" or objs are more
// than MaxCachedObjects.
func (c *RenderCache) Put(key string, objs []*unstructured.Unstructured) {
	if key == "" || len(objs) > MaxCachedObjects {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(key)
	for c.objects+len(objs) > MaxCachedObjects && c.lru.Len() > 0 {
		c.lru.RemoveOldest()
	}
	c.lru.Add(key, deepCopies(objs))
	c.objects += len(objs)
}

func deepCopies(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopy()
	}
	return out
}

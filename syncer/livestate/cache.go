package livestate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
)

// Defaults of Options.
const (
	DefaultIdleTimeout = 10 * time.Minute
	DefaultSyncTimeout = 30 * time.Second
	DefaultMaxScopes   = 2000
)

// directPageSize is the page size (Limit) of a direct list.
const directPageSize = 500

// ErrStopped is returned by List once Run has ended (and to Lists that were
// waiting for a scope when it ended): the cache starts no informer any more.
var ErrStopped = errors.New("livestate: cache stopped")

// ErrSyncTimeout is wrapped by List's error when a scope's first list did
// not complete within Options.SyncTimeout. The scope keeps listing: a later
// List may find it synced.
var ErrSyncTimeout = errors.New("first list not complete within SyncTimeout")

// Scope is one watched (cluster, identity, resource, namespace): the unit
// one informer serves. It is comparable and used as a map key.
type Scope struct {
	// Server is the destination cluster's URL.
	Server string
	// Identity is the username the client acts as ("" = the controller's
	// own identity).
	Identity string
	// GVR is the resource watched.
	GVR schema.GroupVersionResource
	// Namespace is the namespace watched; "" for a cluster-scoped resource
	// (or every namespace of a namespaced one).
	Namespace string
}

// String names the scope for messages: resource.version.group, where,
// the cluster and the identity, e.g. `deployments.v1.apps in namespace
// "shop" on https://10.0.0.1 as "system:serviceaccount:shop:deployer"`.
func (s Scope) String() string {
	r := s.GVR.Resource + "." + s.GVR.Version
	if s.GVR.Group != "" {
		r += "." + s.GVR.Group
	}
	where := "cluster-wide"
	if s.Namespace != "" {
		where = fmt.Sprintf("in namespace %q", s.Namespace)
	}
	on := ""
	if s.Server != "" {
		on = " on " + s.Server
	}
	who := "as the controller"
	if s.Identity != "" {
		who = fmt.Sprintf("as %q", s.Identity)
	}
	return r + " " + where + on + " " + who
}

// Options configure a Cache (New).
type Options struct {
	// NewClient returns a metadata client acting as s.Identity on s.Server
	// (required). It is called once per informer started (and once per
	// direct list), with a context that ends after SyncTimeout or when the
	// scope is stopped, which it must honour (Run waits for it); the client
	// it returns is used for the informer's whole life. Its error is
	// returned by List, wrapped with the scope.
	NewClient func(ctx context.Context, s Scope) (metadata.Interface, error)
	// TrackingAnnotation is the annotation whose value names the
	// Application managing an object ("deputy.dev/tracking-id", value
	// "NAMESPACE/NAME"). Required.
	TrackingAnnotation string
	// OnChange is called with the tracking annotation's value when a
	// tracked object is added, deleted, or changed in a way that can matter
	// (see the package documentation); for a change of the annotation
	// itself, with the old value too), with the scope whose informer saw
	// it. The value is whatever the object says: anyone who may write an
	// object in a scope can name any Application, so the receiver must
	// check that the scope is one that Application reads. It runs on the
	// informer's notification goroutine and must not block. Optional.
	OnChange func(tracking string, s Scope)
	// IdleTimeout: a scope no List asked for within this long is stopped by
	// Run (default DefaultIdleTimeout).
	IdleTimeout time.Duration
	// SyncTimeout bounds how long List waits for a new scope's first list
	// (default DefaultSyncTimeout).
	SyncTimeout time.Duration
	// MaxScopes bounds the informers; a List for a new scope beyond it
	// lists directly with the client (paged, Limit 500) and counts it in
	// Stats (default DefaultMaxScopes).
	MaxScopes int
	// Logger receives the scopes' starts, stops and failures, and the
	// informers' own logging. Optional.
	Logger logr.Logger
}

// Stats is a snapshot of a Cache.
type Stats struct {
	// Scopes is the number of scopes with a running informer.
	Scopes int
	// Objects is the number of objects those informers hold.
	Objects int
	// DirectLists is the number of Lists answered by a direct list because
	// MaxScopes informers were running (monotonic, since New).
	DirectLists int64
}

// Cache holds one metadata informer per Scope in use. Its methods are safe
// for concurrent use.
type Cache struct {
	opts Options
	log  logr.Logger
	now  func() time.Time

	mu     sync.Mutex
	scopes map[Scope]*entry
	closed bool
	wg     sync.WaitGroup // one per scope goroutine (start and informer)

	direct atomic.Int64
}

// New returns a Cache for opts, with defaults for the zero durations and
// MaxScopes. Errors: NewClient or TrackingAnnotation missing. List may be
// called at once; Run stops idle scopes and, when its context ends, every
// informer.
func New(opts Options) (*Cache, error) {
	if opts.NewClient == nil {
		return nil, errors.New("livestate: Options.NewClient is required")
	}
	if opts.TrackingAnnotation == "" {
		return nil, errors.New("livestate: Options.TrackingAnnotation is required")
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	if opts.MaxScopes <= 0 {
		opts.MaxScopes = DefaultMaxScopes
	}
	return &Cache{opts: opts, log: opts.Logger, now: time.Now, scopes: map[Scope]*entry{}}, nil
}

// Run stops the scopes no List asked for within IdleTimeout (checking a few
// times per IdleTimeout) until ctx ends; then it stops every informer,
// fails the Lists still waiting with ErrStopped, and returns once every
// informer goroutine has exited. List works before Run too; after Run has
// returned it fails with ErrStopped. Call Run once.
func (c *Cache) Run(ctx context.Context) {
	period := min(max(c.opts.IdleTimeout/4, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.shutdown()
			return
		case <-t.C:
			c.stopIdle()
		}
	}
}

// shutdown stops every scope and waits for their goroutines.
func (c *Cache) shutdown() {
	c.mu.Lock()
	c.closed = true
	for _, e := range c.scopes {
		c.forgetLocked(e, ErrStopped)
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.log.V(1).Info("livestate: every scope stopped")
}

// stopIdle stops the scopes no List uses now or asked for within
// IdleTimeout.
func (c *Cache) stopIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for _, e := range c.scopes {
		if e.inUse == 0 && now.Sub(e.lastUsed) >= c.opts.IdleTimeout {
			c.log.V(1).Info("livestate: stopping an idle scope", "scope", e.scope.String())
			c.forgetLocked(e, errIdle)
		}
	}
}

// List returns the objects of s as the scope's identity sees them, from the
// scope's informer: the first List of a scope starts it and waits up to
// SyncTimeout for its first list; Lists of a scope being started wait for
// the same informer. The items are shared with the cache and other callers:
// callers must not modify them. They are sorted by namespace and name.
//
// Beyond MaxScopes running informers, a new scope is listed directly with
// the client (paged) and counted in Stats.DirectLists.
//
// Errors: the scope's list/watch failure as the apiserver returned it
// (apierrors.IsForbidden and friends work), wrapped with the scope's
// resource, namespace and identity; ctx's error; ErrSyncTimeout wrapped with
// the scope and SyncTimeout; ErrStopped after Run. A scope whose informer
// failed before its first list, or whose watch failed with Forbidden,
// Unauthorized or NotFound, is stopped and forgotten: the next List starts
// it afresh.
func (c *Cache) List(ctx context.Context, s Scope) ([]*metav1.PartialObjectMetadata, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e, err := c.acquire(s)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return c.listDirect(ctx, s)
	}
	defer c.release(e)
	return c.wait(ctx, e)
}

// acquire returns s's entry, marked in use, starting its informer if it is
// new; nil (and no error) when s must be listed directly (MaxScopes).
func (c *Cache) acquire(s Scope) (*entry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrStopped
	}
	e := c.scopes[s]
	if e == nil {
		if len(c.scopes) >= c.opts.MaxScopes {
			return nil, nil
		}
		e = newEntry(s, c.log)
		c.scopes[s] = e
		c.wg.Add(1)
		go c.runScope(e)
	}
	e.inUse++
	e.lastUsed = c.now()
	return e, nil
}

// release marks one List of e done.
func (c *Cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.inUse--
	e.lastUsed = c.now()
}

// wait waits for e's first list (or its failure, ctx, SyncTimeout) and
// returns its objects.
func (c *Cache) wait(ctx context.Context, e *entry) ([]*metav1.PartialObjectMetadata, error) {
	timer := time.NewTimer(c.opts.SyncTimeout)
	defer timer.Stop()
	timeout := func() error {
		return fmt.Errorf("livestate: %s: %w (%s)", e.scope, ErrSyncTimeout, c.opts.SyncTimeout)
	}
	select {
	case <-e.started:
	case <-e.failed:
		return nil, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, timeout()
	}
	select {
	case <-e.inf.HasSyncedChecker().Done():
	case <-e.failed:
		return nil, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, timeout()
	}
	select {
	case <-e.failed:
		return nil, e.err
	default:
	}
	return objects(e.inf.GetStore().List()), nil
}

// listDirect lists s with a client of its own, page by page, without an
// informer (MaxScopes).
func (c *Cache) listDirect(ctx context.Context, s Scope) ([]*metav1.PartialObjectMetadata, error) {
	c.direct.Add(1)
	cl, err := c.opts.NewClient(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("livestate: a client for %s: %w", s, err)
	}
	ri := cl.Resource(s.GVR).Namespace(s.Namespace)
	var out []*metav1.PartialObjectMetadata
	opts := metav1.ListOptions{Limit: directPageSize}
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("livestate: list %s: %w", s, err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	sortObjects(out)
	return out, nil
}

// objects converts an informer store's items, sorted.
func objects(items []any) []*metav1.PartialObjectMetadata {
	out := make([]*metav1.PartialObjectMetadata, 0, len(items))
	for _, it := range items {
		if o, ok := it.(*metav1.PartialObjectMetadata); ok {
			out = append(out, o)
		}
	}
	sortObjects(out)
	return out
}

func sortObjects(objs []*metav1.PartialObjectMetadata) {
	slices.SortFunc(objs, func(a, b *metav1.PartialObjectMetadata) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// Stats returns the scopes with a running informer, the objects they hold
// and the direct lists made because of MaxScopes.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	var running []*entry
	for _, e := range c.scopes {
		if e.inf != nil {
			running = append(running, e)
		}
	}
	c.mu.Unlock()
	st := Stats{Scopes: len(running), DirectLists: c.direct.Load()}
	for _, e := range running {
		st.Objects += len(e.inf.GetStore().ListKeys())
	}
	return st
}

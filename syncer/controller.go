package syncer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// ApplicationsResource is the resource of deputy.dev Applications.
var ApplicationsResource = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: "applications"}

// RevisionResolver resolves an Application's targetRevision to a commit SHA
// (the Engine implements it).
type RevisionResolver interface {
	ResolveRevision(ctx context.Context, app *v1alpha1.Application) (string, error)
}

// LeaderElectionOptions configure the Lease of client-go's leader election
// (k8s.io/client-go/tools/leaderelection; the durations have its meaning).
type LeaderElectionOptions struct {
	// Namespace and Name locate the coordination.k8s.io/v1 Lease.
	Namespace, Name string
	// Identity names this replica in the Lease; "" means host name plus a
	// random suffix.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod: client-go's
	// LeaderElectionConfig fields (LeaseDuration > RenewDeadline >
	// 1.2 × RetryPeriod).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// ControllerOptions configure NewController. Config, Runner, Revisions and
// Projects are required.
type ControllerOptions struct {
	// Config is deputy's own client configuration (its ServiceAccount in a
	// Pod): it reads and updates Applications, holds the Lease. It never
	// touches an Application's destination (the Runner does, impersonating).
	Config *rest.Config
	// Runner runs operations (the Engine).
	Runner Runner
	// Revisions resolves targetRevisions for automated syncs (the Engine).
	Revisions RevisionResolver
	// Projects returns the deputy.dev AppProject an Application uses
	// (policy.ResolveAppProject over the project namespaces), an error
	// matching policy.ErrProjectNotUsable when it has none it may use (the
	// operation then ends in Error with that message), or
	// policy.ErrNotLoaded while the AppProjects have not been read yet.
	Projects func(app *v1alpha1.Application) (*v1alpha1.AppProject, error)
	// Workers bounds the operations running at once (sync.parallelism).
	Workers int
	// ReconcilePeriod is how often automated Applications are looked at.
	ReconcilePeriod time.Duration
	// ShutdownGrace bounds how long running operations may take to finish
	// when deputy stops while leading; operations still running then are
	// cancelled and left to the next leader.
	ShutdownGrace time.Duration
	// Namespaces are the namespaces whose Applications this controller
	// reconciles; empty means every namespace.
	Namespaces []string
	// LeaderElection configures the Lease.
	LeaderElection LeaderElectionOptions
	// ApplicationsServed, if set, reports whether kube-apiserver serves the
	// deputy.dev Application CRD (cluster mode: policy.ClusterSource.Served),
	// and known is false while that cannot be told yet. The controller lists
	// Applications and campaigns for the Lease only while it is served, and
	// looks again when ApplicationsServedChanged is called. nil means served.
	ApplicationsServed func() (served, known bool)
	Logger             *slog.Logger
}

// Controller is deputy's Application controller for cluster mode. Every
// replica runs one: it watches Applications through an informer, records
// requested syncs on the Application (its operation field, as Argo CD
// does), and serves their status and progress. Only the replica holding the
// Lease (client-go leader election) runs operations: it starts the
// operation an Application records, writes the state to the status
// subresource, then removes the operation field; it also syncs automated
// Applications when Git moved and, with selfHeal, every ReconcilePeriod.
//
// A leader that loses the Lease mid-operation cancels it and writes nothing
// more: the operation field and the Running state stay, and the next leader
// runs the operation again from the start (server-side apply and prune are
// idempotent), so an operation is never left half-pruned and marked done.
type Controller struct {
	opts       ControllerOptions
	log        *slog.Logger
	client     dynamic.NamespaceableResourceInterface
	kube       kubernetes.Interface
	informer   cache.SharedIndexInformer
	namespaces map[string]bool
	identity   string

	leading atomic.Bool
	ops     atomic.Pointer[Operations]
	// servedChanged (cap 1) wakes Run when ApplicationsServed may have
	// changed; informerStarted is set once the informer runs.
	servedChanged   chan struct{}
	informerStarted atomic.Bool

	mu       sync.Mutex
	queue    workqueue.TypedRateLimitingInterface[string]
	termDone chan struct{}
	pending  map[string]recordedOperation // requested through this replica, not yet seen by the informer
	cleared  map[types.UID]int64          // this term: Application UID -> generation after its operation field was removed
	running  map[string]recordedOperation // this term: the operation each Application runs, for the status writer
	due      map[string]bool              // automated check due
	subs     map[string]map[*appSub]struct{}
	term     *term // the current leadership term, nil when not leading
}

// recordedOperation identifies one recorded operation: the Application
// object (its UID: a deleted and recreated Application is another object),
// the generation that recorded it, and the operation itself.
type recordedOperation struct {
	uid        types.UID
	generation int64
	operation  v1alpha1.Operation
	// retryCount is the operation's status.operationState.retryCount while
	// this term runs it (see MaxOperationAttempts).
	retryCount int64
}

// MaxOperationAttempts is how many times an operation is started in cluster
// mode without ending: a leader that finds it started that many times (its
// Running state's retryCount + 1) ends it in Error instead of running it
// again, so that an operation that crashes deputy does not crash every
// replica in turn.
const MaxOperationAttempts = 3

// recordOf is the record of the operation app (which has one) records.
func recordOf(app *v1alpha1.Application) recordedOperation {
	return recordedOperation{uid: app.UID, generation: app.Generation, operation: *app.Operation.DeepCopy()}
}

// NewController builds the controller; Run starts it.
//
// Errors: a required option is missing, or a client cannot be built from
// Config.
func NewController(opts ControllerOptions) (*Controller, error) {
	switch {
	case opts.Config == nil:
		return nil, errors.New("syncer: ControllerOptions.Config is required")
	case opts.Runner == nil:
		return nil, errors.New("syncer: ControllerOptions.Runner is required")
	case opts.Revisions == nil:
		return nil, errors.New("syncer: ControllerOptions.Revisions is required")
	case opts.Projects == nil:
		return nil, errors.New("syncer: ControllerOptions.Projects is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ReconcilePeriod <= 0 {
		opts.ReconcilePeriod = 3 * time.Minute
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 30 * time.Second
	}
	le := &opts.LeaderElection
	if le.Namespace == "" || le.Name == "" {
		return nil, errors.New("syncer: ControllerOptions.LeaderElection needs Namespace and Name")
	}
	if le.LeaseDuration == 0 {
		le.LeaseDuration, le.RenewDeadline, le.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	restCfg := rest.CopyConfig(opts.Config)
	if restCfg.QPS == 0 && restCfg.RateLimiter == nil {
		// client-go's default (5/s, burst 10) would take a minute to record
		// a push's syncs of a few hundred Applications (controller-runtime
		// raises it too).
		restCfg.QPS, restCfg.Burst = controllerQPS, controllerBurst
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("syncer: failed to build the Applications client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("syncer: failed to build the Lease client: %w", err)
	}
	identity := le.Identity
	if identity == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		identity = cmpOr(host, "deputy") + "_" + hex.EncodeToString(b[:])
	}
	c := &Controller{
		opts: opts, log: opts.Logger.With("controller", "applications"),
		client: dyn.Resource(ApplicationsResource), kube: kube, identity: identity,
		pending: map[string]recordedOperation{}, cleared: map[types.UID]int64{}, running: map[string]recordedOperation{}, due: map[string]bool{},
		subs: map[string]map[*appSub]struct{}{}, servedChanged: make(chan struct{}, 1),
	}
	if len(opts.Namespaces) > 0 {
		c.namespaces = map[string]bool{}
		for _, ns := range opts.Namespaces {
			c.namespaces[ns] = true
		}
	}
	c.informer = dynamicinformer.NewFilteredDynamicInformer(dyn, ApplicationsResource, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
	// The store holds typed Applications: converted once per event, not per
	// lookup. Applications of other namespaces are dropped here.
	if err := c.informer.SetTransform(c.transform); err != nil {
		return nil, err
	}
	var lastWatchErr atomic.Value
	_ = c.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		// The CRD may not be installed yet: say so once per distinct error.
		if prev, _ := lastWatchErr.Load().(string); prev != err.Error() {
			lastWatchErr.Store(err.Error())
			c.log.Warn("listing or watching deputy.dev Applications failed (is the Application CRD installed? is deputy allowed to list and watch applications?)", "error", err.Error())
		}
	})
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.dueIfAutomated(nil, obj)
			c.onEvent(obj)
		},
		UpdateFunc: func(old, obj any) {
			c.dueIfAutomated(old, obj)
			c.onEvent(obj)
		},
		DeleteFunc: func(obj any) {
			c.forget(obj)
			c.onEvent(obj)
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Identity is this replica's name in the Lease.
func (c *Controller) Identity() string { return c.identity }

// IsLeader reports whether this replica holds the Lease now.
func (c *Controller) IsLeader() bool { return c.leading.Load() }

// Synced reports whether the Applications have been listed.
func (c *Controller) Synced() bool { return c.informer.HasSynced() }

func (c *Controller) manages(namespace string) bool {
	return c.namespaces == nil || c.namespaces[namespace]
}

// skipped marks objects of unmanaged namespaces, which the store keeps
// under their key but as this value (a transform cannot drop an object).
type skipped struct{ metav1.ObjectMeta }

func (c *Controller) transform(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // tombstones keep what the store held
	}
	if !c.manages(u.GetNamespace()) {
		return &skipped{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName()}}, nil
	}
	u.SetManagedFields(nil)
	app := &v1alpha1.Application{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, app); err != nil {
		// The CRD's schema makes this unreachable for stored objects; keep
		// the identity so that the Application is known but not run.
		c.log.Error("Application does not decode; it is ignored until fixed", "application", u.GetNamespace()+"/"+u.GetName(), "error", err.Error())
		return &skipped{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName()}}, nil
	}
	return app, nil
}

// eventApplication is the Application of an informer event (also of a
// deletion tombstone), nil for anything else (skipped objects).
func eventApplication(obj any) *v1alpha1.Application {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	app, _ := obj.(*v1alpha1.Application)
	return app
}

func (c *Controller) onEvent(obj any) {
	app := eventApplication(obj)
	if app == nil {
		return
	}
	key := appKey(app.Namespace, app.Name)
	c.mu.Lock()
	if p, ok := c.pending[key]; ok && (app.UID != p.uid || app.Generation >= p.generation) {
		delete(c.pending, key)
	}
	for s := range c.subs[key] {
		s.notify()
	}
	q := c.queue
	c.mu.Unlock()
	if q != nil {
		q.Add(key)
	}
}

// forget drops what the controller remembers of a deleted Application.
func (c *Controller) forget(obj any) {
	app := eventApplication(obj)
	if app == nil {
		return
	}
	key := appKey(app.Namespace, app.Name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pending[key]; ok && p.uid == app.UID {
		delete(c.pending, key)
	}
	delete(c.cleared, app.UID)
	delete(c.due, key)
}

// dueIfAutomated marks an automated Application due for a look when it is
// new or its spec changed (as Argo CD compares again on a spec change).
func (c *Controller) dueIfAutomated(old, obj any) {
	app, ok := obj.(*v1alpha1.Application)
	if !ok || automated(app) == nil || !c.leading.Load() {
		return // a new term looks at every Application anyway
	}
	if prev, ok := old.(*v1alpha1.Application); ok && reflect.DeepEqual(prev.Spec, app.Spec) {
		return
	}
	c.mu.Lock()
	c.due[appKey(app.Namespace, app.Name)] = true
	c.mu.Unlock()
}

// Application returns the Application namespace/name from the informer's
// store, nil when there is none (or it is in a namespace this controller
// does not reconcile, or the Application CRD is not served).
//
// Errors: policy.ErrNotLoaded until the Applications have been listed.
func (c *Controller) Application(namespace, name string) (*v1alpha1.Application, error) {
	if !c.informer.HasSynced() {
		if c.knownNotServed() {
			return nil, nil
		}
		return nil, policy.ErrNotLoaded
	}
	return c.get(appKey(namespace, name)), nil
}

// Applications lists the Applications this controller reconciles (copies);
// none while the Application CRD is not served.
//
// Errors: policy.ErrNotLoaded until they have been listed.
func (c *Controller) Applications() ([]*v1alpha1.Application, error) {
	if !c.informer.HasSynced() {
		if c.knownNotServed() {
			return nil, nil
		}
		return nil, policy.ErrNotLoaded
	}
	var out []*v1alpha1.Application
	for _, obj := range c.informer.GetStore().List() {
		if app, ok := obj.(*v1alpha1.Application); ok {
			out = append(out, app.DeepCopy())
		}
	}
	return out, nil
}

func (c *Controller) get(key string) *v1alpha1.Application {
	obj, ok, err := c.informer.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	app, ok := obj.(*v1alpha1.Application)
	if !ok {
		return nil
	}
	return app.DeepCopy()
}

// Start records a sync on the Application (its operation field) for the
// leader to run, and returns the requested operation as a Running state
// whose ObservedGeneration is the generation that recorded it. project is
// not used: the leader looks the AppProject up when it starts the
// operation. It implements the API's SyncService in cluster mode.
//
// Errors: ErrOperationInProgress when the Application already records an
// operation; the API's NotFound when the Application is gone; an error
// naming sync.applicationNamespaces for an Application this controller does
// not reconcile; other API errors (apierrors.StatusError) as they come.
func (c *Controller) Start(ctx context.Context, app *v1alpha1.Application, _ *v1alpha1.AppProject, op v1alpha1.SyncOperation, initiatedBy v1alpha1.InitiatedBy) (*v1alpha1.OperationState, error) {
	if app == nil {
		return nil, errors.New("failed to start a sync: an Application is required")
	}
	if !c.manages(app.Namespace) {
		return nil, fmt.Errorf("deputy does not reconcile Applications in namespace %q: add it to sync.applicationNamespaces", app.Namespace)
	}
	opCopy := op
	operation := v1alpha1.Operation{Sync: &opCopy, InitiatedBy: initiatedBy}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&operation)
	if err != nil {
		return nil, err
	}
	recorded, err := c.recordOperation(ctx, app, content)
	if err != nil {
		return nil, err
	}
	key := appKey(app.Namespace, app.Name)
	c.mu.Lock()
	c.pending[key] = recordedOperation{uid: recorded.GetUID(), generation: recorded.GetGeneration(), operation: operation}
	c.mu.Unlock()
	return &v1alpha1.OperationState{
		Operation:          operation,
		Phase:              v1alpha1.OperationRunning,
		Message:            "sync requested: recorded on the Application; the leader runs it",
		StartedAt:          metav1.Now(),
		ObservedGeneration: recorded.GetGeneration(),
	}, nil
}

// recordOperation writes operation (unstructured content) into app's
// operation field and returns the updated object. One request in the common
// case: a merge patch conditioned on the resourceVersion the informer has,
// which holds no operation; a conflict (the cache was behind) falls back to
// read-modify-write.
//
// Errors: ErrOperationInProgress when the Application records an operation;
// API errors as they come.
func (c *Controller) recordOperation(ctx context.Context, app *v1alpha1.Application, operation map[string]any) (*unstructured.Unstructured, error) {
	client := c.client.Namespace(app.Namespace)
	if cached := c.get(appKey(app.Namespace, app.Name)); cached != nil && cached.Operation == nil && cached.ResourceVersion != "" {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cached.ResourceVersion}, "operation": operation})
		if err != nil {
			return nil, err
		}
		recorded, err := client.Patch(ctx, app.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		if !apierrors.IsConflict(err) {
			return recorded, err
		}
	}
	var recorded *unstructured.Unstructured
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := client.Get(ctx, app.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if existing, found, _ := unstructured.NestedFieldNoCopy(u.Object, "operation"); found && existing != nil {
			return ErrOperationInProgress
		}
		u.Object["operation"] = operation
		recorded, err = client.Update(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	return recorded, err
}

// ApplicationStatus returns the Application's status as the informer has it
// (the leader writes it); the zero status when it is unknown.
func (c *Controller) ApplicationStatus(namespace, name string) v1alpha1.ApplicationStatus {
	app := c.get(appKey(namespace, name))
	if app == nil {
		return v1alpha1.ApplicationStatus{Sync: v1alpha1.SyncStatus{Status: v1alpha1.SyncStatusCodeUnknown}}
	}
	if app.Status.Sync.Status == "" {
		app.Status.Sync.Status = v1alpha1.SyncStatusCodeUnknown
	}
	return app.Status
}

// Run starts the informer and campaigns for the Lease until ctx ends; while
// leading it runs operations. With ApplicationsServed set it does neither
// while the Application CRD is not served: it waits, without a request to
// the Lease, and starts when the CRD appears (and stops campaigning, as on
// ctx's end, when it goes away). When ctx ends while leading, it stops
// taking operations, lets the running ones finish for up to ShutdownGrace
// (longer ones are cancelled and left to the next leader), then releases
// the Lease so that another replica takes over at once, and logs whether
// the release succeeded. It returns nil after that.
func (c *Controller) Run(ctx context.Context) error {
	le := c.opts.LeaderElection
	inner, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, le.Name,
		c.kube.CoreV1(), c.kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: c.identity})
	if err != nil {
		return fmt.Errorf("syncer: failed to build the Lease lock: %w", err)
	}
	lock := &reportingLock{Interface: inner, log: c.log, namespace: le.Namespace, name: le.Name}
	waiting := false
	for ctx.Err() == nil {
		served, known := c.served()
		if !served {
			if !waiting && known {
				c.log.Info("the deputy.dev Application CRD is not served: not campaigning for the sync Lease until it is (the impersonation gate works without it)",
					"crd", "applications."+v1alpha1.Group)
			}
			waiting = waiting || known
			select {
			case <-ctx.Done():
			case <-c.servedChanged:
			}
			continue
		}
		waiting = false
		if c.informerStarted.CompareAndSwap(false, true) {
			go c.informer.RunWithContext(ctx)
		}
		// One campaign lasts while the CRD is served: its end (or ctx's) is
		// a graceful stop, as on SIGTERM.
		servedCtx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for servedCtx.Err() == nil {
				select {
				case <-servedCtx.Done():
				case <-c.servedChanged:
					if served, _ := c.served(); !served {
						c.log.Info("the deputy.dev Application CRD is no longer served: stopping the Application controller")
						stop()
					}
				}
			}
		}()
		err := c.campaign(servedCtx, lock)
		stop()
		<-watched // a change it consumed is seen by served() above
		if err != nil {
			return err
		}
	}
	return nil
}

// ApplicationsServedChanged tells the controller that what
// ControllerOptions.ApplicationsServed reports may have changed. It never
// blocks.
func (c *Controller) ApplicationsServedChanged() {
	select {
	case c.servedChanged <- struct{}{}:
	default:
	}
}

func (c *Controller) served() (served, known bool) {
	if c.opts.ApplicationsServed == nil {
		return true, true
	}
	return c.opts.ApplicationsServed()
}

// knownNotServed reports whether the Application CRD is known not to be
// served (and the informer has not listed Applications).
func (c *Controller) knownNotServed() bool {
	served, known := c.served()
	return known && !served
}

// waitTerm waits until the current leadership term (if any) has drained.
func (c *Controller) waitTerm() {
	c.mu.Lock()
	done := c.termDone
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}

// term is one leadership term, as the status writer sees it.
type term struct {
	leader context.Context // cancelled when the Lease is lost
	mu     sync.Mutex
	drain  context.Context // set on a graceful stop; its end cancels operations
}

// ending reports whether operations are being cancelled because the term
// ends: their states must not be written (the next leader runs them again).
func (t *term) ending() bool {
	if t.leader.Err() != nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.drain != nil && t.drain.Err() != nil
}

// The controller's client-side rate limit when the configuration sets none.
const (
	controllerQPS   = 50
	controllerBurst = 100
)

// reconcileWorkers is how many Applications are looked at concurrently;
// operations themselves run in the Operations queue.
const reconcileWorkers = 2

// lead is one leadership term: it runs until the Lease is lost or rootCtx
// ends.
func (c *Controller) lead(rootCtx, leaderCtx context.Context) {
	done := make(chan struct{})
	t := &term{leader: leaderCtx}
	c.mu.Lock()
	c.termDone = done
	c.cleared = map[types.UID]int64{}
	c.running = map[string]recordedOperation{}
	c.term = t
	c.mu.Unlock()
	defer close(done)
	defer func() {
		c.mu.Lock()
		c.term = nil
		c.mu.Unlock()
	}()
	if rootCtx.Err() != nil {
		return
	}
	c.log.Info("leading syncs: this replica runs operations", "identity", c.identity)
	c.leading.Store(true)
	defer c.leading.Store(false)
	// The moment the Lease is lost this replica stops counting as leader.
	stopLeading := context.AfterFunc(leaderCtx, func() { c.leading.Store(false) })
	defer stopLeading()

	ops := NewOperations(c.opts.Runner, OperationsOptions{Workers: c.opts.Workers, Logger: c.opts.Logger,
		StatusWriter: &statusWriter{c: c, term: t},
		// Whether or not the final state was written: the Application is
		// free now, and may record another operation already.
		OnFinished: func(namespace, name string) {
			key := appKey(namespace, name)
			c.mu.Lock()
			delete(c.running, key)
			q := c.queue
			c.mu.Unlock()
			if q != nil {
				q.Add(key)
			}
		}})
	c.ops.Store(ops)
	defer c.ops.Store(nil)
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "deputy-applications"})
	workCtx, stopWork := context.WithCancel(leaderCtx)
	defer stopWork()
	// Stopping deputy ends the wait for the informer too: waitTerm (which
	// holds the Lease until this term returns) must not wait for a cache
	// that never syncs (CRD missing, RBAC missing).
	stopOnRoot := context.AfterFunc(rootCtx, stopWork)
	defer stopOnRoot()

	var wg sync.WaitGroup
	if cache.WaitForCacheSync(workCtx.Done(), c.informer.HasSynced) {
		c.mu.Lock()
		c.queue = queue
		c.mu.Unlock()
		c.dueAll(queue)
		for range reconcileWorkers {
			wg.Go(func() {
				for c.processNext(workCtx, ops, queue) {
				}
			})
		}
		ticker := time.NewTicker(c.opts.ReconcilePeriod)
	loop:
		for {
			select {
			case <-leaderCtx.Done():
				break loop
			case <-rootCtx.Done():
				break loop
			case <-ticker.C:
				c.dueAll(queue)
			}
		}
		ticker.Stop()
	}
	c.mu.Lock()
	c.queue = nil
	c.mu.Unlock()
	queue.ShutDown()
	stopWork()
	wg.Wait()

	if leaderCtx.Err() == nil {
		// Graceful stop while leading: let running operations finish, but
		// only while the Lease is still held: losing it mid-drain cancels
		// them at once (the next leader runs them again).
		drain, cancel := context.WithTimeout(leaderCtx, c.opts.ShutdownGrace)
		defer cancel()
		t.mu.Lock()
		t.drain = drain
		t.mu.Unlock()
		if err := ops.Shutdown(drain); err != nil {
			c.log.Warn("operations still running at shutdown were cancelled; the next leader runs them again", "error", err.Error())
		}
		return
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_ = ops.Shutdown(cancelled)
}

// dueAll marks every automated Application due for a look and queues it.
func (c *Controller) dueAll(queue workqueue.TypedRateLimitingInterface[string]) {
	for _, obj := range c.informer.GetStore().List() {
		app, ok := obj.(*v1alpha1.Application)
		if !ok {
			continue
		}
		key := appKey(app.Namespace, app.Name)
		if automated(app) != nil {
			c.mu.Lock()
			c.due[key] = true
			c.mu.Unlock()
		}
		queue.Add(key)
	}
}

func automated(app *v1alpha1.Application) *v1alpha1.SyncPolicyAutomated {
	if app.Spec.SyncPolicy == nil {
		return nil
	}
	return app.Spec.SyncPolicy.Automated
}

func (c *Controller) processNext(ctx context.Context, ops *Operations, queue workqueue.TypedRateLimitingInterface[string]) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	if err := c.reconcile(ctx, ops, key); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("reconciling the Application failed; retrying", "application", key, "error", err.Error())
			queue.AddRateLimited(key)
		}
		return true
	}
	queue.Forget(key)
	return true
}

// reconcile runs the operation key's Application records, or decides on an
// automated sync when one is due.
func (c *Controller) reconcile(ctx context.Context, ops *Operations, key string) error {
	app := c.get(key)
	if app == nil {
		return nil
	}
	if app.Operation != nil && app.Operation.Sync != nil {
		return c.runRecorded(ctx, ops, app)
	}
	c.mu.Lock()
	due := c.due[key]
	delete(c.due, key)
	c.mu.Unlock()
	if due {
		return c.autoSync(ctx, app)
	}
	return nil
}

// runRecorded starts the operation app records, unless it runs, is done
// (only the removal of the field is pending), or is this term's own
// finished operation seen through a stale cache.
func (c *Controller) runRecorded(ctx context.Context, ops *Operations, app *v1alpha1.Application) error {
	key := appKey(app.Namespace, app.Name)
	if ops.Running(app.Namespace, app.Name) {
		return nil
	}
	c.mu.Lock()
	clearedAt, seen := c.cleared[app.UID]
	c.mu.Unlock()
	if seen && app.Generation <= clearedAt {
		return nil // this term's own finished operation, seen through a stale cache
	}
	st := app.Status.OperationState
	var retryCount int64
	if st != nil && st.ObservedGeneration == app.Generation {
		if st.Phase != v1alpha1.OperationRunning {
			return c.clearOperation(ctx, app.Namespace, app.Name, recordOf(app))
		}
		if attempts := st.RetryCount + 1; attempts >= MaxOperationAttempts {
			return c.endInterrupted(ctx, app, attempts)
		}
		retryCount = st.RetryCount + 1
		c.log.Info("running an operation again: the leader that started it stopped before it ended",
			"application", key, "startedAt", st.StartedAt.UTC().Format(time.RFC3339), "retryCount", retryCount)
	}
	project, err := c.opts.Projects(app)
	if errors.Is(err, policy.ErrProjectNotUsable) {
		now := metav1.Now()
		final := &v1alpha1.OperationState{
			Operation: *app.Operation.DeepCopy(), Phase: v1alpha1.OperationError, Message: err.Error(),
			StartedAt: now, FinishedAt: &now, ObservedGeneration: app.Generation,
		}
		rec := recordOf(app)
		if err := c.writeStatus(ctx, app.Namespace, app.Name, rec, final); err != nil {
			return err
		}
		return c.clearOperation(ctx, app.Namespace, app.Name, rec)
	}
	if err != nil {
		return err
	}
	rec := recordOf(app)
	rec.retryCount = retryCount
	if retryCount > 0 {
		// Record the attempt before running it: if this one crashes deputy
		// too, the next leader must see it.
		now := metav1.Now()
		running := &v1alpha1.OperationState{
			Operation: *app.Operation.DeepCopy(), Phase: v1alpha1.OperationRunning,
			Message:   fmt.Sprintf("started again after an interruption (attempt %d of at most %d)", retryCount+1, MaxOperationAttempts),
			StartedAt: now, ObservedGeneration: app.Generation, RetryCount: retryCount,
		}
		if err := c.writeStatus(ctx, app.Namespace, app.Name, rec, running); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.running[key] = rec
	c.mu.Unlock()
	_, err = ops.Start(ctx, app, project, *app.Operation.Sync, app.Operation.InitiatedBy)
	if errors.Is(err, ErrOperationInProgress) || errors.Is(err, ErrShuttingDown) {
		return nil
	}
	return err
}

// endInterrupted ends an operation that was started attempts times without
// ending (each leader running it stopped or crashed) in Error, and removes
// it: it is not run again.
func (c *Controller) endInterrupted(ctx context.Context, app *v1alpha1.Application, attempts int64) error {
	st := app.Status.OperationState
	now := metav1.Now()
	final := &v1alpha1.OperationState{
		Operation: *app.Operation.DeepCopy(), Phase: v1alpha1.OperationError,
		Message:   fmt.Sprintf("the operation was interrupted %d times (deputy stopped or crashed while running it, for example on a repository that exceeds its limits) and is not run again: sync again to retry", attempts),
		StartedAt: st.StartedAt, FinishedAt: &now, ObservedGeneration: app.Generation, RetryCount: st.RetryCount,
	}
	c.log.Warn("an operation was interrupted too often; it ends in Error", "application", appKey(app.Namespace, app.Name), "attempts", attempts)
	rec := recordOf(app)
	if err := c.writeStatus(ctx, app.Namespace, app.Name, rec, final); err != nil {
		return err
	}
	return c.clearOperation(ctx, app.Namespace, app.Name, rec)
}

// autoSync requests an automated sync when Git moved since the last
// successful sync, or always with selfHeal; like Argo CD it does not retry
// an automated sync of a revision whose last automated sync failed (without
// selfHeal).
func (c *Controller) autoSync(ctx context.Context, app *v1alpha1.Application) error {
	auto := automated(app)
	if auto == nil {
		return nil
	}
	key := appKey(app.Namespace, app.Name)
	sha, err := c.opts.Revisions.ResolveRevision(ctx, app)
	if err != nil {
		c.log.Warn("automated sync: cannot resolve the target revision", "application", key, "error", err.Error())
		return nil // looked at again next period
	}
	last := app.Status.OperationState
	switch {
	case !auto.SelfHeal && app.Status.Sync.Status == v1alpha1.SyncStatusCodeSynced && app.Status.Sync.Revision == sha:
		return nil
	case !auto.SelfHeal && app.Status.Sync.Status == v1alpha1.SyncStatusCodeOutOfSync && app.Status.Sync.Revision == sha &&
		(!auto.Prune || (last != nil && last.Operation.InitiatedBy.Automated && last.Operation.Sync != nil && last.Operation.Sync.Prune &&
			last.SyncResult != nil && last.SyncResult.Revision == sha)):
		// Synced to this revision, but objects that prune would delete
		// remain: an automated sync without prune changes nothing, and one
		// with prune already left them (Argo CD does not retry either).
		return nil
	case !auto.SelfHeal && last != nil && last.Phase != v1alpha1.OperationSucceeded && last.Operation.InitiatedBy.Automated &&
		last.SyncResult != nil && last.SyncResult.Revision == sha:
		c.log.Info("automated sync skipped: the last automated sync of this revision failed", "application", key, "revision", sha)
		return nil
	}
	_, err = c.Start(ctx, app, nil, v1alpha1.SyncOperation{Revision: sha, Prune: auto.Prune}, v1alpha1.InitiatedBy{Automated: true})
	if errors.Is(err, ErrOperationInProgress) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Trigger requests an automated sync of app now, if it is automated (the
// Git push webhook's action). It returns ErrOperationInProgress when an
// operation is recorded already.
func (c *Controller) Trigger(ctx context.Context, app *v1alpha1.Application, initiatedBy v1alpha1.InitiatedBy) error {
	auto := automated(app)
	if auto == nil {
		return nil
	}
	initiatedBy.Automated = true
	_, err := c.Start(ctx, app, nil, v1alpha1.SyncOperation{Prune: auto.Prune}, initiatedBy)
	return err
}

// statusWriter writes operation states to the status subresource for the
// Operations queue of one term, and removes the operation field once the
// final state is written.
type statusWriter struct {
	c    *Controller
	term *term
}

var errTermEnding = errors.New("not written: this replica stopped leading; the next leader runs the operation again")

func (w *statusWriter) WriteOperationState(ctx context.Context, namespace, name string, state *v1alpha1.OperationState) error {
	if w.term.ending() {
		return errTermEnding
	}
	key := appKey(namespace, name)
	w.c.mu.Lock()
	rec, ok := w.c.running[key]
	w.c.mu.Unlock()
	if !ok {
		return fmt.Errorf("not written: no record of the operation of %s", key)
	}
	state.RetryCount = rec.retryCount
	// A leader that stops renewing is replaced LeaseDuration after its last
	// renewal but notices only RenewDeadline after it: the writes must end
	// within the difference.
	le := w.c.opts.LeaderElection
	ctx, cancel := context.WithTimeout(ctx, le.LeaseDuration-le.RenewDeadline)
	defer cancel()
	if err := w.c.writeStatus(ctx, namespace, name, rec, state); err != nil {
		return err
	}
	if state.Phase == v1alpha1.OperationRunning {
		return nil
	}
	if w.term.ending() {
		return errTermEnding
	}
	return w.c.clearOperation(ctx, namespace, name, rec)
}

// errReplaced is returned for an Application that was deleted and created
// again (another UID) since the operation was recorded.
var errReplaced = errors.New("not written: the Application was deleted (and perhaps created again) since the operation was recorded")

// writeStatus sets status.operationState (and status.sync after a
// successful sync that was not a dry run: SyncStatusAfter) of the Application rec was
// recorded on, re-reading on conflicts. It writes nothing to a replaced
// Application (errReplaced).
func (c *Controller) writeStatus(ctx context.Context, namespace, name string, rec recordedOperation, state *v1alpha1.OperationState) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := c.client.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errReplaced
		}
		if err != nil {
			return err
		}
		if u.GetUID() != rec.uid {
			return errReplaced
		}
		var status v1alpha1.ApplicationStatus
		if raw, ok := u.Object["status"].(map[string]any); ok {
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status) // a bad old status is replaced
		}
		status.OperationState = state
		if sync, ok := SyncStatusAfter(state); ok {
			status.Sync = sync
		} else if status.Sync.Status == "" {
			status.Sync.Status = v1alpha1.SyncStatusCodeUnknown
		}
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
		if err != nil {
			return err
		}
		u.Object["status"] = content
		_, err = c.client.Namespace(namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
}

// clearOperation removes the Application's operation field if it still
// holds rec's operation on rec's object: an operation recorded meanwhile
// (after someone removed rec's, as users cancel a sync) stays, and so does
// anything on a replaced Application. However the operation was spelled
// (sameOperation), one that ran is removed.
func (c *Controller) clearOperation(ctx context.Context, namespace, name string, rec recordedOperation) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := c.client.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if u.GetUID() != rec.uid {
			return nil
		}
		have, found := u.Object["operation"]
		if !found || have == nil {
			return nil
		}
		if !sameOperation(u.GetGeneration(), have, rec) {
			c.log.Info("the Application records another operation now; it is left for the next run", "application", appKey(namespace, name))
			return nil
		}
		delete(u.Object, "operation")
		out, err := c.client.Namespace(namespace).Update(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.cleared[rec.uid] = out.GetGeneration()
		c.mu.Unlock()
		return nil
	})
}

// sameOperation reports whether the operation field have, read from the
// Application at generation, is still the operation rec records. The field
// is part of what the generation counts (everything but metadata and
// status): at rec's generation it is rec's operation, whatever its
// spelling. After a later change (a spec edit, or the operation removed and
// another recorded) the two are compared as decoded values, never as the
// JSON objects: kube-apiserver keeps what the writer sent ("prune": false,
// "revision": "", an empty initiatedBy), a decoded record drops it, and an
// operation recorded by `kubectl patch` would never compare equal and never
// be removed.
func sameOperation(generation int64, have any, rec recordedOperation) bool {
	if generation == rec.generation {
		return true
	}
	m, ok := have.(map[string]any)
	if !ok {
		return false
	}
	var op v1alpha1.Operation
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &op); err != nil {
		return false
	}
	return equality.Semantic.DeepEqual(op, rec.operation)
}

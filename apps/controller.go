package apps

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

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
	Runner syncer.Runner
	// Deleter deletes the resources of an Application deleted with a
	// resources finalizer (cascading deletion); nil means Runner when it
	// implements ResourceDeleter (the Engine does). Without one, such an
	// Application keeps its finalizer and a DeletionError condition.
	Deleter ResourceDeleter
	// Revisions resolves targetRevisions for comparisons and automated
	// syncs (the Engine).
	Revisions syncer.RevisionResolver
	// Comparer compares Applications' live state with Git (drift
	// detection: status.sync, status.resources, selfHeal); nil compares
	// nothing (status.sync then says what the last sync left).
	Comparer syncer.Comparer
	// Differ computes diffs on every replica, leading or not (the Engine);
	// nil: Diff answers ErrDiffUnavailable.
	Differ syncer.Differ
	// Projects returns the deputy.dev AppProject an Application uses
	// (ClusterProjects: policy.ResolveAppProject over the project
	// namespaces in the cluster state), an error
	// matching policy.ErrProjectNotUsable when it has none it may use (the
	// operation then ends in Error with that message), or
	// policy.ErrNotLoaded while the AppProjects have not been read yet.
	Projects ProjectResolver
	// Workers bounds the operations running at once (sync.parallelism),
	// and apart from them the diffs this replica answers.
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
	// deputy.dev Application CRD (cluster mode: clustersource.Source.Served),
	// and known is false while that cannot be told yet. The controller lists
	// Applications and campaigns for the Lease only while it is served, and
	// looks again when ApplicationsServedChanged is called. nil means served.
	ApplicationsServed func() (served, known bool)
	// Logger receives the controller's and the operations' lines
	// (including each operation's audit line). Default: discard.
	Logger *slog.Logger
	// Metrics, if set, counts the attempts this replica runs while it leads
	// and reports the Applications it reconciles (NewMetrics).
	Metrics *Metrics
}

// Controller is deputy's Application controller for cluster mode. Every
// replica runs one: it watches Applications through an informer, records
// requested syncs on the Application (its operation field, as Argo CD
// does), and serves their status and progress. Only the replica holding the
// Lease (client-go leader election) runs operations: it starts the
// operation an Application records, writes the state to the status
// subresource, then removes the operation field; it also compares every
// Application with Git (every ReconcilePeriod and when a tracked object
// changes: controller_drift.go) and syncs automated Applications when Git
// moved and, with selfHeal, when the live state drifted.
//
// A leader that loses the Lease mid-operation cancels it and writes nothing
// more: the operation field and the Running state stay, and the next leader
// runs the operation again from the start (server-side apply and prune are
// idempotent), so an operation is never left half-pruned and marked done.
//
// It implements Applications for cluster mode.
type Controller struct {
	opts       ControllerOptions
	log        *slog.Logger
	client     dynamic.NamespaceableResourceInterface
	kube       kubernetes.Interface
	informer   cache.SharedIndexInformer
	namespaces map[string]bool
	identity   string
	diffs      *diffGate

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
	due      map[string]bool              // a look (comparison, automated sync) due, at revisions resolved again
	liveDue  map[string]bool              // a look due at the revisions resolved last (a tracked object changed)
	revs     map[string][]string          // the revisions each Application was last compared at
	selfHeal map[string]selfHealState     // selfHeal's last sync of each Application
	looking  map[string]bool              // a look runs (lookAsync); true: the next one resolves revisions again
	// lookSlots and liveSlots bound the looks running at once (lookWorkers,
	// liveLookWorkers).
	lookSlots, liveSlots chan struct{}
	// deleting: a deletion of the Application's resources runs (this
	// term); deleteFailures: the backoff of failed ones.
	deleting       map[string]bool
	deleteFailures map[string]deletionRetry
	deletions      sync.WaitGroup // the running deletions
	subs           map[string]map[*appSub]struct{}
	term           *term // the current leadership term, nil when not leading
}

var _ Applications = (*Controller)(nil)

// recordedOperation identifies one recorded operation: the Application
// object (its UID: a deleted and recreated Application is another object),
// the generation that recorded it, and the operation itself.
type recordedOperation struct {
	uid        types.UID
	generation int64
	operation  v1alpha1.Operation
	// interruptions is the operation's status.operationState.interruptions while
	// this term runs it (see MaxOperationAttempts).
	interruptions int64
}

// MaxOperationAttempts is how many times an operation is started in cluster
// mode without ending: a leader that finds it started that many times (its
// Running state's interruptions + 1) ends it in Error instead of running it
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
		return nil, errors.New("apps: ControllerOptions.Config is required")
	case opts.Runner == nil:
		return nil, errors.New("apps: ControllerOptions.Runner is required")
	case opts.Revisions == nil:
		return nil, errors.New("apps: ControllerOptions.Revisions is required")
	case opts.Projects == nil:
		return nil, errors.New("apps: ControllerOptions.Projects is required")
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
		return nil, errors.New("apps: ControllerOptions.LeaderElection needs Namespace and Name")
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
		return nil, fmt.Errorf("apps: failed to build the Applications client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("apps: failed to build the Lease client: %w", err)
	}
	identity := le.Identity
	if identity == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		identity = cmp.Or(host, "deputy") + "_" + hex.EncodeToString(b[:])
	}
	c := &Controller{
		opts: opts, log: opts.Logger.With("controller", "applications"),
		client: dyn.Resource(ApplicationsResource), kube: kube, identity: identity, diffs: newDiffGate(opts.Differ, opts.Workers),
		deleting: map[string]bool{}, deleteFailures: map[string]deletionRetry{},
		pending: map[string]recordedOperation{}, cleared: map[types.UID]int64{}, running: map[string]recordedOperation{}, due: map[string]bool{},
		liveDue: map[string]bool{}, revs: map[string][]string{}, selfHeal: map[string]selfHealState{},
		looking: map[string]bool{}, lookSlots: make(chan struct{}, lookWorkers), liveSlots: make(chan struct{}, liveLookWorkers),
		subs: map[string]map[*appSub]struct{}{}, servedChanged: make(chan struct{}, 1),
	}
	if len(opts.Namespaces) > 0 {
		c.namespaces = map[string]bool{}
		for _, ns := range opts.Namespaces {
			c.namespaces[ns] = true
		}
	}
	if err := c.newInformer(dyn); err != nil {
		return nil, err
	}
	opts.Metrics.observe(c)
	return c, nil
}

// Identity is this replica's name in the Lease.
func (c *Controller) Identity() string { return c.identity }

// Diff implements Applications on every replica: at most Workers diffs at
// once.
func (c *Controller) Diff(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, op v1alpha1.SyncOperation, objects []*unstructured.Unstructured) (*v1alpha1.ApplicationDiff, error) {
	return c.diffs.diff(ctx, app, project, op, objects)
}

// IsLeader reports whether this replica holds the Lease now.
func (c *Controller) IsLeader() bool { return c.leading.Load() }

// Synced reports whether the Applications have been listed.
func (c *Controller) Synced() bool { return c.informer.HasSynced() }

// The controller's client-side rate limit when the configuration sets none.
const (
	controllerQPS   = 50
	controllerBurst = 100
)

// reconcileWorkers is how many Applications are reconciled concurrently;
// operations themselves run in the Operations queue, and comparisons with
// Git (looks) in at most lookWorkers goroutines.
const (
	reconcileWorkers = 2
	lookWorkers      = 4
	liveLookWorkers  = 2
)

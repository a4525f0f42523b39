package clustersource

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// AppProjectResources are the AppProject resources a Source watches,
// in the order their projects appear in a policy.ClusterState.
var AppProjectResources = []schema.GroupVersionResource{
	v1alpha1.ArgoCDGroupVersion.WithResource("appprojects"),
	v1alpha1.SchemeGroupVersion.WithResource("appprojects"),
}

// Defaults of Options.
const (
	// DefaultDebounce is how long a Source lets a burst of
	// informer events accumulate before it rebuilds the state. Together with
	// a rebuild (~0.2 s at 100k bindings) a change is visible well within 1 s.
	DefaultDebounce = 100 * time.Millisecond
	// DefaultDiscoveryInterval is how often a Source asks discovery
	// whether the AppProject CRDs are installed.
	DefaultDiscoveryInterval = 30 * time.Second
	// discoveryTimeout bounds one discovery request of New's client.
	discoveryTimeout = 15 * time.Second
	// discoveryRetryMin is the first retry delay while a group's presence is
	// still unknown (discovery failing at start); it doubles up to the
	// discovery interval.
	discoveryRetryMin = time.Second
)

// Options configure a Source.
type Options struct {
	Logger *slog.Logger
	// OnChange, if set, is the first listener (see Source.OnChange).
	OnChange func(*policy.ClusterState)
	// Namespaces restricts the AppProjects read to these namespaces (one
	// watch per namespace and group); empty means every namespace. RBAC
	// objects are always read cluster-wide.
	Namespaces []string
	// Debounce is how long events accumulate before a rebuild, counted from
	// the first event of a burst; default DefaultDebounce. Keep it at
	// most 200ms so that a change is visible within 1 s.
	Debounce time.Duration
	// DiscoveryInterval is how often the presence of the AppProject CRDs is
	// re-checked; default DefaultDiscoveryInterval. With a Metadata client
	// the CRDs are also watched, so a CRD installed or deleted is noticed
	// within seconds; the poll is the fallback.
	DiscoveryInterval time.Duration
	// Resources are further custom resources whose presence (discovery
	// serves them) the source tracks for its user, as it tracks the
	// AppProjects': Served reports it. Cluster mode passes deputy.dev
	// applications, whose CRD decides whether the Application controller
	// runs.
	Resources []schema.GroupVersionResource
	// OnServedChange, if set, is called whenever what Served reports for an
	// AppProject resource or one of Resources changes (also when it is
	// first known), from the discovery goroutine: it must not block.
	OnServedChange func()
}

// Clients are the clients a Source reads the cluster with.
type Clients struct {
	// Kube lists and watches the RBAC objects (rbac.authorization.k8s.io/v1).
	Kube kubernetes.Interface
	// Dynamic lists and watches the AppProjects of both groups.
	Dynamic dynamic.Interface
	// Discovery tells whether the AppProject CRDs are installed; default
	// Kube's discovery client.
	Discovery discovery.ServerResourcesInterfaceWithContext
	// Metadata, if set, watches the CustomResourceDefinitions (metadata
	// only; apiextensions.k8s.io/v1 customresourcedefinitions get, list,
	// watch) so that installing or deleting one the source cares about
	// triggers discovery at once; nil leaves only the DiscoveryInterval
	// poll.
	Metadata metadata.Interface
}

// Status reports the state of a Source for readiness and logs.
type Status struct {
	// Synced is true once every RBAC informer has listed and, for each
	// AppProject group, discovery said the CRD is absent or its informers
	// have listed. It stays true afterwards.
	Synced bool
	// LastError joins the failures of list, watch and discovery calls that
	// have not succeeded since (one per informer at most); nil when every
	// call's last attempt succeeded. While it is set the state may be stale.
	LastError error
	// LastErrorTime is when the most recent of those failures happened.
	LastErrorTime time.Time
	// LastBuild is when the serving state was built; zero before the first
	// synced build.
	LastBuild time.Time
	// Counts of the serving state.
	Roles, ClusterRoles, RoleBindings, ClusterRoleBindings int
	// Projects counts the AppProjects in the state; SkippedProjects those
	// left out because they do not decode or validate (logged by name).
	Projects, SkippedProjects int
	// AbsentGroups are the AppProject groups whose CRD is not installed.
	AbsentGroups []string
}

// Ready reports whether the source has synced and no list, watch or
// discovery call is currently failing.
func (s Status) Ready() bool { return s.Synced && s.LastError == nil }

// Source reads the cluster's policy through informers (cluster mode):
// Roles, ClusterRoles, RoleBindings and ClusterRoleBindings through a typed
// informer factory, and the AppProjects of argoproj.io and deputy.dev through
// the dynamic client. ClusterRoles are taken as they are: the cluster's
// controller-manager already aggregated them.
//
// Informer event handlers only signal a change; one goroutine rebuilds the
// immutable policy.ClusterState off the event path, coalescing all events of a
// debounce window into one rebuild, and swaps it in atomically.
//
// An AppProject group whose CRD is not installed (discovery does not know the
// resource) counts as having no projects and does not hold up Synced; the
// CRD's presence is re-checked every DiscoveryInterval, so installing it later
// starts its informer, and deleting it stops it. Safe for concurrent use.
type Source struct {
	clients           Clients
	log               *slog.Logger
	listenersMu       sync.Mutex
	listeners         []func(*policy.ClusterState)
	namespaces        []string
	debounce          time.Duration
	discoveryInterval time.Duration

	current atomic.Pointer[policy.ClusterState]
	started atomic.Bool

	changed     chan struct{} // cap 1: a rebuild is pending
	rediscover  chan struct{} // cap 1: check the CRDs now
	crds        *crdWatch     // nil without a Metadata client
	onServed    func()
	factory     informers.SharedInformerFactory
	rbac        []cache.SharedIndexInformer // roles, clusterroles, rolebindings, clusterrolebindings
	everSynced  bool                        // rebuild goroutine only
	conversions map[string]convertedProject // rebuild goroutine only

	mu        sync.Mutex              // guards the fields below
	resources *policy.ResourceCatalog // built-in resources plus the last discovery
	groups    []*projectGroup
	tracked   []*trackedResource // Options.Resources
	failures  map[string]failure
	status    Status
}

type groupState int

const (
	groupUnknown groupState = iota
	groupAbsent
	groupPresent
)

// projectGroup is one AppProject resource and its informers (one per
// namespace of the Namespaces option, or one for all namespaces).
type projectGroup struct {
	gvr       schema.GroupVersionResource
	state     groupState
	informers []cache.SharedIndexInformer
	names     []string // failure keys of the informers
	cancel    context.CancelFunc
	done      sync.WaitGroup
}

type failure struct {
	err error
	at  time.Time
}

// convertedProject caches the conversion of one AppProject object; obj is the
// informer's (immutable) object it was made from.
type convertedProject struct {
	obj     *unstructured.Unstructured
	project *policy.Project
}

// New returns a source reading the cluster cfg points at.
// RBAC objects are read as protobuf. Call Run to start it.
//
// Errors: a nil cfg, clients that cannot be built from it, invalid options.
func New(cfg *rest.Config, opts Options) (*Source, error) {
	if cfg == nil {
		return nil, errors.New("cluster source: no REST config (--kubeconfig or --in-cluster)")
	}
	base := rest.CopyConfig(cfg)
	if base.UserAgent == "" {
		base.UserAgent = "deputy (" + rest.DefaultKubernetesUserAgent() + ")"
	}
	typed := rest.CopyConfig(base)
	typed.ContentType = runtime.ContentTypeProtobuf
	typed.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(typed)
	if err != nil {
		return nil, fmt.Errorf("failed to create the Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(base)
	if err != nil {
		return nil, fmt.Errorf("failed to create the dynamic client: %w", err)
	}
	dc := rest.CopyConfig(base)
	dc.Timeout = discoveryTimeout
	disco, err := discovery.NewDiscoveryClientForConfig(dc)
	if err != nil {
		return nil, fmt.Errorf("failed to create the discovery client: %w", err)
	}
	meta, err := metadata.NewForConfig(base)
	if err != nil {
		return nil, fmt.Errorf("failed to create the metadata client: %w", err)
	}
	return NewForClients(Clients{Kube: kube, Dynamic: dyn, Discovery: disco, Metadata: meta}, opts)
}

// NewForClients returns a source reading through the given
// clients (fake clientsets in tests). Call Run to start it.
//
// Errors: a missing client, invalid options.
func NewForClients(c Clients, opts Options) (*Source, error) {
	if c.Kube == nil || c.Dynamic == nil {
		return nil, errors.New("cluster source: Kube and Dynamic clients are required")
	}
	if c.Discovery == nil {
		c.Discovery = discovery.ToDiscoveryInterfaceWithContext(c.Kube.Discovery())
	}
	if opts.Debounce < 0 || opts.DiscoveryInterval < 0 {
		return nil, fmt.Errorf("cluster source: Debounce (%s) and DiscoveryInterval (%s) must not be negative", opts.Debounce, opts.DiscoveryInterval)
	}
	for _, ns := range opts.Namespaces {
		if ns == "" {
			return nil, errors.New("cluster source: Namespaces must not contain an empty name (leave the list empty for every namespace)")
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{
		clients:           c,
		log:               log,
		listeners:         listenersOf(opts.OnChange),
		namespaces:        slices.Compact(slices.Sorted(slices.Values(opts.Namespaces))),
		debounce:          cmp.Or(opts.Debounce, DefaultDebounce),
		discoveryInterval: cmp.Or(opts.DiscoveryInterval, DefaultDiscoveryInterval),
		changed:           make(chan struct{}, 1),
		rediscover:        make(chan struct{}, 1),
		conversions:       map[string]convertedProject{},
		failures:          map[string]failure{},
		resources:         policy.BuiltinResources(),
		onServed:          opts.OnServedChange,
	}
	for _, gvr := range AppProjectResources {
		s.groups = append(s.groups, &projectGroup{gvr: gvr})
	}
	for _, gvr := range opts.Resources {
		if gvr.Resource == "" || gvr.Version == "" {
			return nil, fmt.Errorf("cluster source: Resources entry %v needs a version and a resource", gvr)
		}
		s.tracked = append(s.tracked, &trackedResource{gvr: gvr})
	}
	s.setupRBACInformers()
	if c.Metadata != nil {
		s.crds = s.newCRDWatch(c.Metadata)
	}
	return s, nil
}

// Current returns the serving state: nil before Run, then a state whose
// Synced is false (and which holds nothing) until every informer has listed.
func (s *Source) Current() *policy.ClusterState { return s.current.Load() }

// Status returns the source's current status.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.AbsentGroups = nil
	for _, g := range s.groups {
		if g.state == groupAbsent {
			st.AbsentGroups = append(st.AbsentGroups, g.gvr.Group)
		}
	}
	if len(s.failures) > 0 {
		keys := slices.Sorted(maps.Keys(s.failures))
		errs := make([]error, 0, len(keys))
		for _, k := range keys {
			f := s.failures[k]
			errs = append(errs, f.err)
			if f.at.After(st.LastErrorTime) {
				st.LastErrorTime = f.at
			}
		}
		st.LastError = errors.Join(errs...)
	}
	return st
}

// Run starts the informers and the CRD discovery and rebuilds the state on
// every change until ctx ends; then it stops the informers and returns nil.
// List, watch and discovery failures are retried and reported through Status
// and logs, never returned.
//
// Errors: Run was called before.
func (s *Source) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("cluster source: Run called twice")
	}
	s.swap(&policy.ClusterState{RBAC: emptyRBAC(), Resources: policy.BuiltinResources()})

	// Deferred in reverse: the goroutines below end with ctx, then the
	// AppProject informers (which only the discovery goroutine starts) stop,
	// then the RBAC informers.
	defer s.factory.Shutdown()
	defer s.stopGroups()
	var wg sync.WaitGroup
	defer wg.Wait()

	s.factory.Start(ctx.Done())
	if s.crds != nil {
		wg.Go(func() { s.crds.informer.RunWithContext(ctx) })
	}
	wg.Go(func() {
		if cache.WaitForCacheSync(ctx.Done(), hasSynced(s.rbac)...) {
			s.kick()
		}
	})
	wg.Go(func() { s.discoveryLoop(ctx) })
	s.rebuildLoop(ctx)
	return nil
}

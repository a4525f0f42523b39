package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"deputy.dev/deputy/policy/v1alpha1"
)

// AppProjectResources are the AppProject resources a ClusterSource watches,
// in the order their projects appear in a ClusterState.
var AppProjectResources = []schema.GroupVersionResource{
	v1alpha1.ArgoCDGroupVersion.WithResource("appprojects"),
	v1alpha1.SchemeGroupVersion.WithResource("appprojects"),
}

// Defaults of ClusterSourceOptions.
const (
	// DefaultClusterDebounce is how long a ClusterSource lets a burst of
	// informer events accumulate before it rebuilds the state. Together with
	// a rebuild (~0.2 s at 100k bindings) a change is visible well within 1 s.
	DefaultClusterDebounce = 100 * time.Millisecond
	// DefaultDiscoveryInterval is how often a ClusterSource asks discovery
	// whether the AppProject CRDs are installed.
	DefaultDiscoveryInterval = 30 * time.Second
	// discoveryTimeout bounds one discovery request of NewClusterSource's client.
	discoveryTimeout = 15 * time.Second
	// discoveryRetryMin is the first retry delay while a group's presence is
	// still unknown (discovery failing at start); it doubles up to the
	// discovery interval.
	discoveryRetryMin = time.Second
)

// ClusterSourceOptions configure a ClusterSource.
type ClusterSourceOptions struct {
	Logger *slog.Logger
	// OnChange, if set, is called with every new state right after it is
	// swapped in, from the source's rebuild goroutine: it must not block.
	OnChange func(*ClusterState)
	// Namespaces restricts the AppProjects read to these namespaces (one
	// watch per namespace and group); empty means every namespace. RBAC
	// objects are always read cluster-wide.
	Namespaces []string
	// Debounce is how long events accumulate before a rebuild, counted from
	// the first event of a burst; default DefaultClusterDebounce. Keep it at
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

// ClusterClients are the clients a ClusterSource reads the cluster with.
type ClusterClients struct {
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

// ClusterStatus reports the state of a ClusterSource for readiness and logs.
type ClusterStatus struct {
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
func (s ClusterStatus) Ready() bool { return s.Synced && s.LastError == nil }

// ClusterSource reads the cluster's policy through informers (cluster mode):
// Roles, ClusterRoles, RoleBindings and ClusterRoleBindings through a typed
// informer factory, and the AppProjects of argoproj.io and deputy.dev through
// the dynamic client. ClusterRoles are taken as they are: the cluster's
// controller-manager already aggregated them.
//
// Informer event handlers only signal a change; one goroutine rebuilds the
// immutable ClusterState off the event path, coalescing all events of a
// debounce window into one rebuild, and swaps it in atomically.
//
// An AppProject group whose CRD is not installed (discovery does not know the
// resource) counts as having no projects and does not hold up Synced; the
// CRD's presence is re-checked every DiscoveryInterval, so installing it later
// starts its informer, and deleting it stops it. Safe for concurrent use.
type ClusterSource struct {
	clients           ClusterClients
	log               *slog.Logger
	onChange          func(*ClusterState)
	namespaces        []string
	debounce          time.Duration
	discoveryInterval time.Duration

	current atomic.Pointer[ClusterState]
	started atomic.Bool

	changed     chan struct{} // cap 1: a rebuild is pending
	rediscover  chan struct{} // cap 1: check the CRDs now
	crds        *crdWatch     // nil without a Metadata client
	onServed    func()
	factory     informers.SharedInformerFactory
	rbac        []cache.SharedIndexInformer // roles, clusterroles, rolebindings, clusterrolebindings
	everSynced  bool                        // rebuild goroutine only
	conversions map[string]convertedProject // rebuild goroutine only

	mu        sync.Mutex       // guards the fields below
	resources *ResourceCatalog // built-in resources plus the last discovery
	groups    []*projectGroup
	tracked   []*trackedResource // ClusterSourceOptions.Resources
	failures  map[string]failure
	status    ClusterStatus
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
	project *Project
}

// NewClusterSource returns a source reading the cluster cfg points at.
// RBAC objects are read as protobuf. Call Run to start it.
//
// Errors: a nil cfg, clients that cannot be built from it, invalid options.
func NewClusterSource(cfg *rest.Config, opts ClusterSourceOptions) (*ClusterSource, error) {
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
	return NewClusterSourceForClients(ClusterClients{Kube: kube, Dynamic: dyn, Discovery: disco, Metadata: meta}, opts)
}

// NewClusterSourceForClients returns a source reading through the given
// clients (fake clientsets in tests). Call Run to start it.
//
// Errors: a missing client, invalid options.
func NewClusterSourceForClients(c ClusterClients, opts ClusterSourceOptions) (*ClusterSource, error) {
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
	s := &ClusterSource{
		clients:           c,
		log:               log,
		onChange:          opts.OnChange,
		namespaces:        slices.Compact(slices.Sorted(slices.Values(opts.Namespaces))),
		debounce:          cmp.Or(opts.Debounce, DefaultClusterDebounce),
		discoveryInterval: cmp.Or(opts.DiscoveryInterval, DefaultDiscoveryInterval),
		changed:           make(chan struct{}, 1),
		rediscover:        make(chan struct{}, 1),
		conversions:       map[string]convertedProject{},
		failures:          map[string]failure{},
		resources:         BuiltinResources(),
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
func (s *ClusterSource) Current() *ClusterState { return s.current.Load() }

// Status returns the source's current status.
func (s *ClusterSource) Status() ClusterStatus {
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
func (s *ClusterSource) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("cluster source: Run called twice")
	}
	s.swap(&ClusterState{RBAC: emptyRBAC(), Resources: BuiltinResources()})

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

// kick asks for a rebuild; it never blocks, and kicks before the rebuild
// starts reading the informers' stores coalesce.
func (s *ClusterSource) kick() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// rebuildLoop rebuilds the state after changes: the first signal of a burst
// opens a window of s.debounce, all signals within it coalesce into one
// rebuild after it closes. The window is not extended by later signals, so a
// steady stream of events cannot postpone the rebuild: a change is visible at
// most debounce plus two rebuild durations after its event.
func (s *ClusterSource) rebuildLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		}
		timer.Reset(s.debounce)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		// Signals from here on belong to the next rebuild: this one reads
		// the stores afterwards, so it already includes what they announce,
		// and the next one is at worst redundant.
		select {
		case <-s.changed:
		default:
		}
		s.rebuild()
	}
}

// rebuild builds and swaps in a new state, once every informer has synced.
func (s *ClusterSource) rebuild() {
	groups := s.groupSnapshot()
	if !s.everSynced {
		if !s.syncedNow(groups) {
			return
		}
		s.everSynced = true
	}
	start := time.Now()
	objs := RBACObjects{
		Roles:               storeList[*rbacv1.Role](s.rbac[0]),
		ClusterRoles:        storeList[*rbacv1.ClusterRole](s.rbac[1]),
		RoleBindings:        storeList[*rbacv1.RoleBinding](s.rbac[2]),
		ClusterRoleBindings: storeList[*rbacv1.ClusterRoleBinding](s.rbac[3]),
	}
	// Bindings are visited in the order given, which decides the reason
	// when several allow; informer stores have no order, so sort.
	slices.SortFunc(objs.RoleBindings, func(a, b *rbacv1.RoleBinding) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	slices.SortFunc(objs.ClusterRoleBindings, func(a, b *rbacv1.ClusterRoleBinding) int {
		return strings.Compare(a.Name, b.Name)
	})
	rbac, err := NewRBAC(objs, false) // the controller-manager aggregated the ClusterRoles already
	if err != nil {
		// Only aggregation fails, and it is off; keep the serving state.
		s.log.Error("failed to index the cluster's RBAC objects; keeping the previous state", "error", err.Error())
		return
	}
	projects, skipped := s.projects(groups)
	first := !s.current.Load().Synced
	s.mu.Lock()
	resources := s.resources
	s.mu.Unlock()
	s.swap(&ClusterState{RBAC: rbac, Projects: projects, Synced: true, Resources: resources})

	roles, clusterRoles, rbs, crbs := rbac.Counts()
	s.mu.Lock()
	s.status.Synced = true
	s.status.LastBuild = start
	s.status.Roles, s.status.ClusterRoles, s.status.RoleBindings, s.status.ClusterRoleBindings = roles, clusterRoles, rbs, crbs
	s.status.Projects, s.status.SkippedProjects = len(projects), skipped
	s.mu.Unlock()

	attrs := []any{"roles", roles, "clusterRoles", clusterRoles, "roleBindings", rbs, "clusterRoleBindings", crbs,
		"appProjects", len(projects), "skippedAppProjects", skipped, "duration", time.Since(start)}
	if first {
		s.log.Info("cluster policy synced", attrs...)
	} else {
		s.log.Debug("cluster policy rebuilt", attrs...)
	}
}

func (s *ClusterSource) swap(state *ClusterState) {
	s.current.Store(state)
	if s.onChange != nil {
		s.onChange(state)
	}
}

// groupView is what the rebuild needs of a projectGroup, copied under s.mu.
type groupView struct {
	group     string
	state     groupState
	informers []cache.SharedIndexInformer
}

func (s *ClusterSource) groupSnapshot() []groupView {
	s.mu.Lock()
	defer s.mu.Unlock()
	views := make([]groupView, len(s.groups))
	for i, g := range s.groups {
		views[i] = groupView{group: g.gvr.Group, state: g.state, informers: slices.Clone(g.informers)}
	}
	return views
}

// syncedNow reports whether the RBAC informers have synced and every
// AppProject group is known to be absent or has synced informers.
func (s *ClusterSource) syncedNow(groups []groupView) bool {
	for _, inf := range s.rbac {
		if !inf.HasSynced() {
			return false
		}
	}
	for _, g := range groups {
		switch g.state {
		case groupUnknown:
			return false
		case groupPresent:
			for _, inf := range g.informers {
				if !inf.HasSynced() {
					return false
				}
			}
		}
	}
	return true
}

// projects converts the AppProjects of the present groups, reusing the
// conversion of objects that did not change. An object that does not decode
// or validate is skipped (it grants nothing) and logged once per version.
func (s *ClusterSource) projects(groups []groupView) ([]Project, int) {
	var projects []Project
	skipped := 0
	seen := make(map[string]bool, len(s.conversions))
	for _, g := range groups {
		if g.state != groupPresent {
			continue
		}
		start := len(projects)
		for _, inf := range g.informers {
			for _, u := range storeList[*unstructured.Unstructured](inf) {
				key := g.group + "/" + u.GetNamespace() + "/" + u.GetName()
				seen[key] = true
				c, ok := s.conversions[key]
				if !ok || c.obj != u {
					c = convertedProject{obj: u}
					p, err := appProjectFromUnstructured(g.group, u)
					if err != nil {
						s.log.Warn("skipping AppProject that does not decode or validate; it grants nothing until fixed",
							"group", g.group, "namespace", u.GetNamespace(), "name", u.GetName(), "error", err.Error())
					} else {
						c.project = &Project{Group: g.group, Object: p, Source: "cluster"}
					}
					s.conversions[key] = c
				}
				if c.project == nil {
					skipped++
					continue
				}
				projects = append(projects, *c.project)
			}
		}
		slices.SortFunc(projects[start:], func(a, b Project) int {
			return cmp.Or(strings.Compare(a.Object.Namespace, b.Object.Namespace), strings.Compare(a.Object.Name, b.Object.Name))
		})
	}
	for key := range s.conversions {
		if !seen[key] {
			delete(s.conversions, key)
		}
	}
	return projects, skipped
}

// appProjectFromUnstructured decodes an AppProject as the file loader does
// (DecodeAppProject), then validates it.
func appProjectFromUnstructured(group string, u *unstructured.Unstructured) (*v1alpha1.AppProject, error) {
	data, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	p, err := DecodeAppProject(group, data)
	if err != nil {
		return nil, err
	}
	if errs, _ := ValidateAppProject(p); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return p, nil
}

// storeList returns the objects of an informer's store.
func storeList[T any](inf cache.SharedIndexInformer) []T {
	items := inf.GetStore().List()
	out := make([]T, 0, len(items))
	for _, it := range items {
		if o, ok := it.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

func hasSynced(infs []cache.SharedIndexInformer) []cache.InformerSynced {
	fns := make([]cache.InformerSynced, len(infs))
	for i, inf := range infs {
		fns[i] = inf.HasSynced
	}
	return fns
}

func emptyRBAC() *RBAC {
	r, _ := NewRBAC(RBACObjects{}, false)
	return r
}

// setupRBACInformers registers the four RBAC informers with the typed factory.
func (s *ClusterSource) setupRBACInformers() {
	s.factory = informers.NewSharedInformerFactory(s.clients.Kube, 0)
	rbac := func(resource string) string { return "rbac.authorization.k8s.io/v1 " + resource }
	s.rbac = []cache.SharedIndexInformer{
		s.factory.InformerFor(&rbacv1.Role{}, func(c kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
			return s.newInformer(rbac("roles"), c, &rbacv1.Role{}, false,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.RbacV1().Roles("").List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return c.RbacV1().Roles("").Watch(ctx, o)
				})
		}),
		s.factory.InformerFor(&rbacv1.ClusterRole{}, func(c kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
			return s.newInformer(rbac("clusterroles"), c, &rbacv1.ClusterRole{}, false,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.RbacV1().ClusterRoles().List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return c.RbacV1().ClusterRoles().Watch(ctx, o)
				})
		}),
		s.factory.InformerFor(&rbacv1.RoleBinding{}, func(c kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
			return s.newInformer(rbac("rolebindings"), c, &rbacv1.RoleBinding{}, false,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.RbacV1().RoleBindings("").List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return c.RbacV1().RoleBindings("").Watch(ctx, o)
				})
		}),
		s.factory.InformerFor(&rbacv1.ClusterRoleBinding{}, func(c kubernetes.Interface, _ time.Duration) cache.SharedIndexInformer {
			return s.newInformer(rbac("clusterrolebindings"), c, &rbacv1.ClusterRoleBinding{}, false,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return c.RbacV1().ClusterRoleBindings().List(ctx, o)
				},
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return c.RbacV1().ClusterRoleBindings().Watch(ctx, o)
				})
		}),
	}
}

// newInformer returns an informer over list and watch whose every call
// outcome is recorded under name for Status (the generated informers give no
// way to see that a list succeeded again after a failure), whose objects are
// stored without managedFields, and whose events only ask for a rebuild.
// project marks AppProject informers: a NotFound from them means the CRD was
// deleted, and triggers a discovery check.
func (s *ClusterSource) newInformer(name string, client any, exemplar runtime.Object, project bool,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := list(ctx, o)
			s.observe(ctx, name, "list", project, err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := watchFn(ctx, o)
			s.observe(ctx, name, "watch", project, err)
			return w, err
		},
	}, client)
	inf := cache.NewSharedIndexInformerWithOptions(lw, exemplar, cache.SharedIndexInformerOptions{ObjectDescription: name})
	// Neither fails before the informer starts.
	_ = inf.SetTransform(stripManagedFields)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		// A failed list or watch call was recorded above with its cause;
		// what is left is a watch that broke off after it started.
		if !s.failing(name) {
			s.observe(ctx, name, "keep watching", project, err)
		}
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.kick() },
		UpdateFunc: func(any, any) { s.kick() },
		DeleteFunc: func(any) { s.kick() },
	})
	return inf
}

// stripManagedFields drops what deputy never reads before objects enter the
// informer caches (a large share of their memory at 100k bindings).
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// observe records the outcome of a list or watch call: a success clears the
// informer's failure, an error sets it. Errors the reflector handles by
// itself (an expired resource version, a watch closed normally) and errors
// of a shutdown are not failures.
func (s *ClusterSource) observe(ctx context.Context, name, verb string, project bool, err error) {
	switch {
	case err == nil:
		s.setFailure(name, nil)
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
	default:
		s.setFailure(name, fmt.Errorf("failed to %s %s: %w", verb, name, err))
		if project && apierrors.IsNotFound(err) {
			select {
			case s.rediscover <- struct{}{}:
			default:
			}
		}
	}
}

func (s *ClusterSource) failing(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.failures[name]
	return ok
}

func (s *ClusterSource) setFailure(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.failures, name)
		return
	}
	s.failures[name] = failure{err: err, at: time.Now()}
}

// discoveryLoop checks the AppProject CRDs (and the tracked resources) now
// and then every discoveryInterval; at once when a CRD the source cares
// about is created, changed or deleted (the CRD watch) or an AppProject
// informer got NotFound; and sooner while a presence is still unknown or
// discovery does not agree yet with the CRDs the watch sees (kube-apiserver
// serves a new CRD a moment after creating it).
func (s *ClusterSource) discoveryLoop(ctx context.Context) {
	retry := discoveryRetryMin
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := s.discoveryInterval
		if s.discover(ctx) && s.crdsAgree() {
			retry = discoveryRetryMin
		} else {
			wait = min(retry, s.discoveryInterval)
			retry *= 2
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.rediscover:
			timer.Stop()
		}
	}
}

// RefreshResources asks for a discovery of the cluster's resources now
// (the impersonation gate calls it when a request names a resource it does
// not know, such as a custom resource whose definition was just created). It
// never blocks; requests made while one is pending coalesce.
func (s *ClusterSource) RefreshResources() {
	select {
	case s.rediscover <- struct{}{}:
	default:
	}
}

// discoverResources reads every served resource's kind and scope into the
// catalog, and asks for a rebuild when it changed. A partial answer (an
// aggregated API that is down) keeps what the last catalog knew of the
// groups that failed.
func (s *ClusterSource) discoverResources(ctx context.Context) {
	_, lists, err := s.clients.Discovery.ServerGroupsAndResourcesWithContext(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil && len(lists) == 0 {
		s.setFailure("discovery of resources", fmt.Errorf("failed to discover the cluster's resources: %w", err))
		s.log.Error("cannot discover the cluster's resources; the impersonation gate keeps the resources it knew", "error", err.Error())
		return
	}
	s.setFailure("discovery of resources", nil)
	if err != nil {
		s.log.Warn("discovery of the cluster's resources was partial; keeping what was known of the groups that failed", "error", err.Error())
	}
	s.mu.Lock()
	prev := s.resources
	next := BuiltinResources().Merge(CatalogFromDiscovery(lists))
	if err != nil {
		next = prev.Merge(CatalogFromDiscovery(lists))
	}
	changed := !next.Equal(prev)
	s.resources = next
	s.mu.Unlock()
	if changed {
		s.kick()
	}
}

// discover asks discovery about each AppProject resource and starts or stops
// its informers accordingly, asks about each tracked resource, and
// refreshes the resource catalog. It reports whether every presence is
// known, and calls OnServedChange when one changed.
func (s *ClusterSource) discover(ctx context.Context) bool {
	s.discoverResources(ctx)
	known, changed := s.discoverTracked(ctx)
	defer func() {
		if changed {
			s.servedChanged()
		}
	}()
	for i, gvr := range AppProjectResources {
		g := s.groups[i]
		key := "discovery " + gvr.GroupVersion().String()
		present, err := s.crdInstalled(ctx, gvr)
		if ctx.Err() != nil {
			return known
		}
		if err != nil {
			s.setFailure(key, fmt.Errorf("failed to discover %s: %w", gvr.GroupResource(), err))
			s.log.Error("cannot tell whether the AppProject CRD is installed; will retry", "group", gvr.Group, "error", err.Error())
			s.mu.Lock()
			if g.state == groupUnknown {
				known = false
			}
			s.mu.Unlock()
			continue
		}
		s.setFailure(key, nil)
		s.mu.Lock()
		prev := g.state
		s.mu.Unlock()
		if present != (prev == groupPresent) || prev == groupUnknown {
			changed = true
		}
		switch {
		case present && prev != groupPresent:
			s.startGroup(ctx, g)
			s.log.Info("watching AppProjects", "group", gvr.Group, "resource", gvr.GroupResource().String(), "namespaces", s.namespacesAttr())
		case !present && prev != groupAbsent:
			s.stopGroup(g, groupAbsent)
			s.log.Info("AppProject CRD is not installed; the group counts as having no AppProjects until it is", "group", gvr.Group, "resource", gvr.GroupResource().String())
			s.kick()
		}
	}
	return known
}

func (s *ClusterSource) namespacesAttr() string {
	if len(s.namespaces) == 0 {
		return "all"
	}
	return strings.Join(s.namespaces, ",")
}

// crdInstalled reports whether discovery serves gvr.
func (s *ClusterSource) crdInstalled(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
	list, err := s.clients.Discovery.ServerResourcesForGroupVersionWithContext(ctx, gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// startGroup starts the informers of a group found present.
func (s *ClusterSource) startGroup(ctx context.Context, g *projectGroup) {
	namespaces := s.namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	gctx, cancel := context.WithCancel(ctx)
	var infs []cache.SharedIndexInformer
	var names []string
	for _, ns := range namespaces {
		name := g.gvr.GroupVersion().String() + " " + g.gvr.Resource
		if ns != "" {
			name += " in namespace " + ns
		}
		ri := s.clients.Dynamic.Resource(g.gvr).Namespace(ns)
		infs = append(infs, s.newInformer(name, s.clients.Dynamic, &unstructured.Unstructured{}, true,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return ri.List(ctx, o) },
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return ri.Watch(ctx, o) }))
		names = append(names, name)
	}
	s.mu.Lock()
	g.state, g.informers, g.names, g.cancel = groupPresent, infs, names, cancel
	s.mu.Unlock()
	for _, inf := range infs {
		g.done.Go(func() { inf.RunWithContext(gctx) })
	}
	g.done.Go(func() {
		if cache.WaitForCacheSync(gctx.Done(), hasSynced(infs)...) {
			s.kick()
		}
	})
}

// stopGroup stops a group's informers, if running, and sets its state.
func (s *ClusterSource) stopGroup(g *projectGroup, state groupState) {
	s.mu.Lock()
	cancel, names := g.cancel, g.names
	g.state, g.informers, g.names, g.cancel = state, nil, nil, nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		g.done.Wait()
	}
	// Only now: a call still in flight above may have recorded a failure.
	s.mu.Lock()
	for _, n := range names {
		delete(s.failures, n)
	}
	s.mu.Unlock()
}

func (s *ClusterSource) stopGroups() {
	for _, g := range s.groups {
		s.mu.Lock()
		state := g.state
		s.mu.Unlock()
		s.stopGroup(g, state)
	}
}

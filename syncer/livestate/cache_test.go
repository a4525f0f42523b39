package livestate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/fake"
	ktesting "k8s.io/client-go/testing"
)

const tracking = "deputy.dev/tracking-id"

var (
	configMaps  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// cluster is a fake cluster: a fake metadata client whose lists and
// watches can be refused (Forbidden or NotFound) or held, and which counts
// the clients made and the watches opened.
type cluster struct {
	client  *fake.FakeMetadataClient
	clients atomic.Int32
	// refuse, when set, is returned to every list and watch.
	refuse atomic.Pointer[error]
	// hold, when set, blocks lists until it is closed.
	hold    atomic.Pointer[chan struct{}]
	mu      sync.Mutex
	watches []watch.Interface
	watched chan struct{} // one value per watch opened
}

func newCluster(objs ...runtime.Object) *cluster {
	scheme := fake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		panic(err)
	}
	c := &cluster{client: fake.NewSimpleMetadataClient(scheme, objs...), watched: make(chan struct{}, 100)}
	c.client.PrependReactor("list", "*", func(ktesting.Action) (bool, runtime.Object, error) {
		if h := c.hold.Load(); h != nil {
			<-*h
		}
		if err := c.refuse.Load(); err != nil {
			return true, nil, *err
		}
		return false, nil, nil
	})
	c.client.PrependWatchReactor("*", func(a ktesting.Action) (bool, watch.Interface, error) {
		if err := c.refuse.Load(); err != nil {
			return true, nil, *err
		}
		w, err := c.client.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(ktesting.WatchActionImpl).ListOptions)
		if err != nil {
			return true, nil, err
		}
		c.mu.Lock()
		c.watches = append(c.watches, w)
		c.mu.Unlock()
		c.watched <- struct{}{}
		return true, w, nil
	})
	return c
}

func (c *cluster) newClient(context.Context, Scope) (metadata.Interface, error) {
	c.clients.Add(1)
	return c.client, nil
}

// setRefuse makes every list and watch fail with err (nil: succeed).
func (c *cluster) setRefuse(err error) {
	if err == nil {
		c.refuse.Store(nil)
		return
	}
	c.refuse.Store(&err)
}

// endWatches closes the open watches (as an apiserver's watch timeout does).
func (c *cluster) endWatches() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.watches {
		w.Stop()
	}
	c.watches = nil
}

// waitWatch waits for a watch to be opened.
func (c *cluster) waitWatch(t *testing.T) {
	t.Helper()
	select {
	case <-c.watched:
	case <-time.After(5 * time.Second):
		t.Fatal("no watch opened")
	}
}

// pagingClient serves lists one object per page (when a Limit is set) and
// records the direct lists' namespace, Limit and Continue.
type pagingClient struct {
	metadata.Interface
	mu    sync.Mutex
	pages []string
}

// IsWatchListSemanticsUnSupported: like the fake it wraps, it serves no
// watch-list streams.
func (p *pagingClient) IsWatchListSemanticsUnSupported() bool { return true }

func (p *pagingClient) calls() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.pages, ",")
}

func (p *pagingClient) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return pagingGetter{p.Interface.Resource(gvr), p}
}

type pagingGetter struct {
	metadata.Getter
	p *pagingClient
}

func (g pagingGetter) Namespace(ns string) metadata.ResourceInterface {
	return pagingResource{g.Getter.Namespace(ns), g.p, ns}
}

type pagingResource struct {
	metadata.ResourceInterface
	p  *pagingClient
	ns string
}

func (r pagingResource) List(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	r.p.mu.Lock()
	r.p.pages = append(r.p.pages, fmt.Sprintf("%s:%d:%s", r.ns, opts.Limit, opts.Continue))
	r.p.mu.Unlock()
	list, err := r.ResourceInterface.List(ctx, opts)
	if err != nil || opts.Limit == 0 {
		return list, err
	}
	i := 0
	if opts.Continue != "" {
		if _, err := fmt.Sscan(opts.Continue, &i); err != nil {
			return nil, err
		}
	}
	page := *list
	page.Items = list.Items[i : i+1]
	page.Continue = ""
	if i+1 < len(list.Items) {
		page.Continue = fmt.Sprint(i + 1)
	}
	return &page, nil
}

// lists counts the list requests of gvr made to the cluster.
func (c *cluster) lists(gvr schema.GroupVersionResource) int {
	n := 0
	for _, a := range c.client.Actions() {
		if _, ok := a.(ktesting.ListActionImpl); ok && a.GetResource() == gvr {
			n++
		}
	}
	return n
}

func (c *cluster) create(t *testing.T, gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata) {
	t.Helper()
	if _, err := c.client.Resource(gvr).Namespace(o.Namespace).(fake.MetadataClient).CreateFake(o, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) update(t *testing.T, gvr schema.GroupVersionResource, o *metav1.PartialObjectMetadata) {
	t.Helper()
	if _, err := c.client.Resource(gvr).Namespace(o.Namespace).(fake.MetadataClient).UpdateFake(o, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) delete(t *testing.T, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	if err := c.client.Resource(gvr).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// object is a PartialObjectMetadata of kind (apiVersion v1 unless kind is
// Deployment), tracked by app unless app is "".
func object(kind, ns, name, app string) *metav1.PartialObjectMetadata {
	apiVersion := "v1"
	if kind == "Deployment" {
		apiVersion = "apps/v1"
	}
	o := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
	}
	if app != "" {
		o.Annotations = map[string]string{tracking: app}
	}
	return o
}

// startCache makes a Cache for c with opts' durations, runs it, and at the
// test's end stops it and checks that no goroutine is left.
func startCache(t *testing.T, c *cluster, opts Options) *Cache {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	opts.NewClient = c.newClient
	opts.TrackingAnnotation = tracking
	if opts.SyncTimeout == 0 {
		opts.SyncTimeout = 5 * time.Second
	}
	cache, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cache.Run(ctx)
	}()
	t.Cleanup(func() {
		c.hold.Store(nil)
		cancel()
		<-done
	})
	return cache
}

func names(objs []*metav1.PartialObjectMetadata) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.Namespace+"/"+o.Name)
	}
	return strings.Join(s, ",")
}

func TestNewRequiresClientAndAnnotation(t *testing.T) {
	if _, err := New(Options{TrackingAnnotation: tracking}); err == nil || !strings.Contains(err.Error(), "NewClient") {
		t.Errorf("without NewClient: %v", err)
	}
	c := newCluster()
	if _, err := New(Options{NewClient: c.newClient}); err == nil || !strings.Contains(err.Error(), "TrackingAnnotation") {
		t.Errorf("without TrackingAnnotation: %v", err)
	}
}

func TestListSharesOneInformerPerScope(t *testing.T) {
	c := newCluster(object("ConfigMap", "a", "two", ""), object("ConfigMap", "a", "one", "argocd/app"), object("ConfigMap", "b", "three", ""))
	cache := startCache(t, c, Options{})
	ctx := context.Background()
	sa := Scope{Server: "https://k", Identity: "system:serviceaccount:a:deployer", GVR: configMaps, Namespace: "a"}
	for range 2 {
		objs, err := cache.List(ctx, sa)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(objs); got != "a/one,a/two" {
			t.Fatalf("List(a) = %s", got)
		}
	}
	if n := c.clients.Load(); n != 1 {
		t.Errorf("%d clients made for one scope listed twice, want 1", n)
	}
	if n := c.lists(configMaps); n != 1 {
		t.Errorf("%d list requests for one scope listed twice, want 1", n)
	}
	sb := sa
	sb.Namespace = "b"
	objs, err := cache.List(ctx, sb)
	if err != nil || names(objs) != "b/three" {
		t.Fatalf("List(b) = %s, %v", names(objs), err)
	}
	if st := cache.Stats(); st.Scopes != 2 || st.Objects != 3 || st.DirectLists != 0 {
		t.Errorf("Stats = %+v, want 2 scopes, 3 objects", st)
	}
}

func TestListBeforeRun(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	c := newCluster(object("ConfigMap", "a", "one", ""))
	cache, err := New(Options{NewClient: c.newClient, TrackingAnnotation: tracking})
	if err != nil {
		t.Fatal(err)
	}
	if objs, err := cache.List(context.Background(), Scope{GVR: configMaps, Namespace: "a"}); err != nil || len(objs) != 1 {
		t.Fatalf("List before Run = %d objects, %v", len(objs), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cache.Run(ctx) // stops the informer and returns once it has exited
	goleak.VerifyNone(t, ignore)
	if _, err := cache.List(context.Background(), Scope{GVR: configMaps, Namespace: "a"}); !errors.Is(err, ErrStopped) {
		t.Errorf("List after Run = %v, want ErrStopped", err)
	}
}

// changes records OnChange's calls.
type changes chan string

func (ch changes) onChange(tracking string, _ Scope) { ch <- tracking }

// next is the next OnChange call (it fails after a while without one).
func (ch changes) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("OnChange was not called")
		return ""
	}
}

// expect checks that the next calls are want, in order: an event that must
// not call OnChange is followed by one that must, so that the check needs
// no sleep (one scope's events are delivered in order).
func (ch changes) expect(t *testing.T, step string, want ...string) {
	t.Helper()
	for _, w := range want {
		if got := ch.next(t); got != w {
			t.Fatalf("%s: OnChange(%q), want OnChange(%q)", step, got, w)
		}
	}
}

// managed is a managedFields entry.
func managed(manager, subresource, fields string, at time.Time) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: subresource, APIVersion: "v1",
		Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)},
	}
}

func TestOnChangeForTrackedChangesThatMatter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cm := object("ConfigMap", "a", "cm", "argocd/app")
	cm.ManagedFields = []metav1.ManagedFieldsEntry{managed("deputy", "", `{"f:data":{"f:k":{}}}`, t0)}
	dep := object("Deployment", "a", "web", "argocd/app")
	dep.Generation = 1
	dep.ManagedFields = []metav1.ManagedFieldsEntry{
		managed("deputy", "", `{"f:spec":{"f:replicas":{}}}`, t0),
		managed("kube-controller-manager", "status", `{"f:status":{"f:replicas":{}}}`, t0),
	}
	c := newCluster(cm, dep, object("ConfigMap", "a", "untracked", ""))
	ch := make(changes, 100)
	cache := startCache(t, c, Options{OnChange: ch.onChange})
	ctx := context.Background()
	for _, gvr := range []schema.GroupVersionResource{configMaps, deployments} {
		if _, err := cache.List(ctx, Scope{GVR: gvr, Namespace: "a"}); err != nil {
			t.Fatal(err)
		}
		c.waitWatch(t)
	}

	// The first list called nothing: the first call is the marker's.
	c.create(t, configMaps, object("ConfigMap", "a", "marker", "argocd/first"))
	ch.expect(t, "initial list, then a tracked add", "argocd/first")

	// kubectl edit of a tracked ConfigMap's data: a managedFields change.
	edited := cm.DeepCopy()
	edited.ManagedFields = append(edited.ManagedFields, managed("kubectl-edit", "", `{"f:data":{"f:k":{}}}`, t0.Add(time.Minute)))
	c.update(t, configMaps, edited)
	ch.expect(t, "kubectl edit", "argocd/app")

	// The same manager changing other fields.
	edited2 := edited.DeepCopy()
	edited2.ManagedFields[0].FieldsV1 = &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:k":{},"f:k2":{}}}`)}
	c.update(t, configMaps, edited2)
	ch.expect(t, "fields of a manager", "argocd/app")

	// Untracked objects: nothing.
	un := object("ConfigMap", "a", "untracked", "")
	un.Labels = map[string]string{"x": "y"}
	c.update(t, configMaps, un)
	c.create(t, configMaps, object("ConfigMap", "a", "untracked2", ""))
	c.delete(t, configMaps, "a", "untracked2")
	c.create(t, configMaps, object("ConfigMap", "a", "marker2", "argocd/second"))
	ch.expect(t, "untracked objects", "argocd/second")

	// The Deployment's controller writing status: nothing; then a scale by
	// someone else (generation, managedFields): OnChange.
	st := dep.DeepCopy()
	st.ManagedFields[1] = managed("kube-controller-manager", "status", `{"f:status":{"f:replicas":{},"f:readyReplicas":{}}}`, t0.Add(time.Hour))
	st.ResourceVersion = "" // the tracker sets it
	c.update(t, deployments, st)
	c.create(t, deployments, object("Deployment", "a", "marker3", "argocd/third"))
	ch.expect(t, "status write", "argocd/third")
	scaled := st.DeepCopy()
	scaled.Generation = 2
	scaled.ManagedFields = append(scaled.ManagedFields, managed("kubectl", "scale", `{"f:spec":{"f:replicas":{}}}`, t0.Add(2*time.Hour)))
	c.update(t, deployments, scaled)
	ch.expect(t, "a scale", "argocd/app")

	// Moving an object to another Application: both.
	moved := edited2.DeepCopy()
	moved.Annotations[tracking] = "argocd/other"
	c.update(t, configMaps, moved)
	ch.expect(t, "tracking changed", "argocd/other", "argocd/app")

	// Delete of a tracked object.
	c.delete(t, configMaps, "a", "cm")
	ch.expect(t, "tracked delete", "argocd/other")
	select {
	case s := <-ch:
		t.Errorf("unexpected OnChange(%q)", s)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestForbiddenIsReturnedAndForgotten(t *testing.T) {
	c := newCluster(object("ConfigMap", "a", "one", ""))
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New(`User "system:serviceaccount:a:d" cannot list resource "configmaps"`))
	c.setRefuse(forbidden)
	cache := startCache(t, c, Options{})
	s := Scope{Identity: "system:serviceaccount:a:d", GVR: configMaps, Namespace: "a"}
	_, err := cache.List(context.Background(), s)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("List = %v, want Forbidden", err)
	}
	for _, w := range []string{"configmaps.v1", `namespace "a"`, "system:serviceaccount:a:d", "cannot list"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
	if st := cache.Stats(); st.Scopes != 0 {
		t.Errorf("a failed scope is kept: %+v", st)
	}
	c.setRefuse(nil) // the permission was granted
	objs, err := cache.List(context.Background(), s)
	if err != nil || len(objs) != 1 {
		t.Fatalf("List after the grant = %d objects, %v", len(objs), err)
	}
	if n := c.clients.Load(); n != 2 {
		t.Errorf("%d clients made, want 2 (the failed scope started afresh)", n)
	}
}

func TestWatchFailureAfterSyncForgetsTheScope(t *testing.T) {
	for _, refuse := range []error{
		apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("revoked")),
		apierrors.NewUnauthorized("token expired"),
		apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, ""),
	} {
		t.Run(string(apierrors.ReasonForError(refuse)), func(t *testing.T) {
			c := newCluster(object("ConfigMap", "a", "one", ""))
			cache := startCache(t, c, Options{})
			s := Scope{GVR: configMaps, Namespace: "a"}
			if _, err := cache.List(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			c.waitWatch(t)
			c.setRefuse(refuse)
			c.endWatches() // the watch ends; the relist is refused
			deadline := time.Now().Add(10 * time.Second)
			for cache.Stats().Scopes != 0 {
				if time.Now().After(deadline) {
					t.Fatal("the scope was not forgotten")
				}
				time.Sleep(10 * time.Millisecond)
			}
			_, err := cache.List(context.Background(), s)
			if apierrors.ReasonForError(err) != apierrors.ReasonForError(refuse) {
				t.Fatalf("List = %v, want %v", err, refuse)
			}
			c.setRefuse(nil)
			if _, err := cache.List(context.Background(), s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestIdleScopesStopped(t *testing.T) {
	c := newCluster(object("ConfigMap", "a", "one", ""))
	cache := startCache(t, c, Options{IdleTimeout: 50 * time.Millisecond})
	s := Scope{GVR: configMaps, Namespace: "a"}
	if _, err := cache.List(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for cache.Stats().Scopes != 0 {
		if time.Now().After(deadline) {
			t.Fatal("an idle scope was not stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := cache.List(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if n := c.clients.Load(); n != 2 {
		t.Errorf("%d clients made, want 2 (the idle scope started again)", n)
	}
}

func TestMaxScopesListsDirectly(t *testing.T) {
	c := newCluster(object("ConfigMap", "a", "one", ""), object("ConfigMap", "b", "two", ""), object("ConfigMap", "b", "three", ""))
	cache := startCache(t, c, Options{MaxScopes: 1})
	paging := &pagingClient{Interface: c.client}
	cache.opts.NewClient = func(ctx context.Context, s Scope) (metadata.Interface, error) {
		c.clients.Add(1)
		return paging, nil
	}
	ctx := context.Background()
	if _, err := cache.List(ctx, Scope{GVR: configMaps, Namespace: "a"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		objs, err := cache.List(ctx, Scope{GVR: configMaps, Namespace: "b"})
		if err != nil || names(objs) != "b/three,b/two" {
			t.Fatalf("direct List = %s, %v", names(objs), err)
		}
	}
	if st := cache.Stats(); st.Scopes != 1 || st.Objects != 1 || st.DirectLists != 2 {
		t.Errorf("Stats = %+v, want 1 scope, 1 object, 2 direct lists", st)
	}
	// The informer's list of a, then two direct lists of b, two pages each.
	if got := paging.calls(); got != "a:500:,b:500:,b:500:1,b:500:,b:500:1" {
		t.Errorf("lists (namespace:limit:continue) = %s, want a's informer's, then two direct lists of two pages of 500", got)
	}
	c.setRefuse(apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no")))
	if _, err := cache.List(ctx, Scope{GVR: configMaps, Namespace: "b"}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `configmaps.v1 in namespace "b"`) {
		t.Errorf("direct List refused = %v", err)
	}
}

func TestSyncTimeoutAndContext(t *testing.T) {
	c := newCluster(object("ConfigMap", "a", "one", ""))
	hold := make(chan struct{})
	c.hold.Store(&hold)
	cache := startCache(t, c, Options{SyncTimeout: 50 * time.Millisecond})
	s := Scope{GVR: configMaps, Namespace: "a"}
	_, err := cache.List(context.Background(), s)
	if !errors.Is(err, ErrSyncTimeout) || !strings.Contains(err.Error(), "SyncTimeout") || !strings.Contains(err.Error(), "configmaps.v1") {
		t.Fatalf("List = %v, want ErrSyncTimeout naming the scope", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := cache.List(ctx, s); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("List = %v, want the context's error", err)
	}
	close(hold)
	deadline := time.Now().Add(5 * time.Second)
	for {
		objs, err := cache.List(context.Background(), s)
		if err == nil {
			if len(objs) != 1 {
				t.Fatalf("List = %d objects", len(objs))
			}
			break
		}
		if !errors.Is(err, ErrSyncTimeout) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if n := c.clients.Load(); n != 1 {
		t.Errorf("%d clients, want 1: a slow first list keeps its informer", n)
	}
}

func TestNewClientErrorIsReturned(t *testing.T) {
	c := newCluster()
	fail := atomic.Bool{}
	fail.Store(true)
	cache := startCache(t, c, Options{})
	cache.opts.NewClient = func(ctx context.Context, s Scope) (metadata.Interface, error) {
		if fail.Load() {
			return nil, errors.New("no such cluster")
		}
		return c.newClient(ctx, s)
	}
	s := Scope{Server: "https://gone", GVR: configMaps, Namespace: "a"}
	if _, err := cache.List(context.Background(), s); err == nil || !strings.Contains(err.Error(), "no such cluster") || !strings.Contains(err.Error(), "https://gone") {
		t.Fatalf("List = %v", err)
	}
	fail.Store(false)
	if _, err := cache.List(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentListsStartOneInformer(t *testing.T) {
	c := newCluster(object("ConfigMap", "a", "one", ""), object("ConfigMap", "b", "two", ""))
	hold := make(chan struct{})
	c.hold.Store(&hold)
	cache := startCache(t, c, Options{IdleTimeout: 20 * time.Millisecond})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := Scope{GVR: configMaps, Namespace: "a"}
			if i%4 == 3 {
				s.Namespace = "b"
			}
			objs, err := cache.List(context.Background(), s)
			if err == nil && len(objs) != 1 {
				err = fmt.Errorf("%d objects", len(objs))
			}
			if err != nil {
				errs <- err
			}
			_ = cache.Stats()
		}()
	}
	time.Sleep(20 * time.Millisecond) // every List waits for the held first list
	close(hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := c.clients.Load(); n != 2 {
		t.Errorf("%d clients for 2 scopes listed at once by 40 goroutines, want 2", n)
	}
	// Lists racing the idle stop: each gets an answer.
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if _, err := cache.List(context.Background(), Scope{GVR: configMaps, Namespace: "a"}); err != nil {
					t.Error(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

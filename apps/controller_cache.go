package apps

import (
	"context"
	"reflect"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// newInformer builds the Applications informer (Run starts it once the CRD
// is served), with its transform and event handlers.
func (c *Controller) newInformer(dyn dynamic.Interface) error {
	c.informer = dynamicinformer.NewFilteredDynamicInformer(dyn, ApplicationsResource, metav1.NamespaceAll, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
	// The store holds typed Applications: converted once per event, not per
	// lookup. Applications of other namespaces are dropped here.
	if err := c.informer.SetTransform(c.transform); err != nil {
		return err
	}
	var lastWatchErr atomic.Value
	_ = c.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		// The CRD may not be installed yet: say so once per distinct error.
		if prev, _ := lastWatchErr.Load().(string); prev != err.Error() {
			lastWatchErr.Store(err.Error())
			c.log.Warn("listing or watching deputy.dev Applications failed (is the Application CRD installed? is deputy allowed to list and watch applications?)", "error", err.Error())
		}
	})
	_, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
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
	})
	return err
}

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
	delete(c.liveDue, key)
	delete(c.revs, key)
	delete(c.selfHeal, key)
	delete(c.deleteFailures, key)
}

// dueIfAutomated marks an Application due for a look when it is new or its
// spec changed (as Argo CD compares again on a spec change).
func (c *Controller) dueIfAutomated(old, obj any) {
	app, ok := obj.(*v1alpha1.Application)
	if !ok || !c.leading.Load() {
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

// List implements PushTargets: the Applications this controller reconciles
// (copies); none while the Application CRD is not served.
//
// Errors: policy.ErrNotLoaded until they have been listed.
func (c *Controller) List() ([]*v1alpha1.Application, error) {
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

// AppProject implements Applications with ControllerOptions.Projects.
func (c *Controller) AppProject(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
	return c.opts.Projects(app)
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

package clustersource

import (
	"context"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// CRDResource is the resource of CustomResourceDefinitions, which a
// Source with a Metadata client watches (metadata only) to notice a
// CRD it cares about within seconds.
var CRDResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// trackedResource is one Options.Resources entry and what
// discovery last said of it.
type trackedResource struct {
	gvr   schema.GroupVersionResource
	state groupState
}

// crdName is the name of the CRD that defines gvr's resource.
func crdName(gvr schema.GroupVersionResource) string { return gvr.Resource + "." + gvr.Group }

// Served reports whether kube-apiserver serves gvr, an AppProject resource
// (AppProjectResources) or one of Options.Resources, as the
// last discovery said; known is false until discovery has answered (and for
// any other resource).
func (s *Source) Served(gvr schema.GroupVersionResource) (served, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.groups {
		if g.gvr == gvr {
			return g.state == groupPresent, g.state != groupUnknown
		}
	}
	for _, t := range s.tracked {
		if t.gvr == gvr {
			return t.state == groupPresent, t.state != groupUnknown
		}
	}
	return false, false
}

// discoverTracked asks discovery about each tracked resource. known is
// false while one's presence has never been told; changed when one's
// presence changed (or became known).
func (s *Source) discoverTracked(ctx context.Context) (known, changed bool) {
	known = true
	for _, t := range s.tracked {
		present, err := s.crdInstalled(ctx, t.gvr)
		if ctx.Err() != nil {
			return known, changed
		}
		s.mu.Lock()
		prev := t.state
		switch {
		case err != nil:
			// The AppProjects' discovery reports the failure (the same
			// kube-apiserver answers both); keep what was known.
			known = known && prev != groupUnknown
		case present && prev != groupPresent:
			t.state, changed = groupPresent, true
		case !present && prev != groupAbsent:
			t.state, changed = groupAbsent, true
		}
		s.mu.Unlock()
		switch {
		case err != nil:
			s.log.Debug("cannot tell whether a CRD is installed; will retry", "resource", t.gvr.GroupResource().String(), "error", err.Error())
		case present && prev != groupPresent:
			s.log.Info("CRD is served", "resource", t.gvr.GroupResource().String())
		case !present && prev != groupAbsent:
			s.log.Info("CRD is not installed", "resource", t.gvr.GroupResource().String())
		}
	}
	return known, changed
}

func (s *Source) servedChanged() {
	if s.onServed != nil {
		s.onServed()
	}
}

// crdWatch is a metadata informer on the CustomResourceDefinitions: an
// event of one of names (the CRDs of the AppProject and tracked resources)
// triggers discovery at once, so that a CRD installed after deputy (Argo
// CD's AppProject, deputy's Application) counts within seconds, not on the
// next DiscoveryInterval poll. The store holds names only.
type crdWatch struct {
	informer cache.SharedIndexInformer
	names    map[string]bool
}

func (s *Source) newCRDWatch(client metadata.Interface) *crdWatch {
	w := &crdWatch{names: map[string]bool{}}
	for _, gvr := range AppProjectResources {
		w.names[crdName(gvr)] = true
	}
	for _, t := range s.tracked {
		w.names[crdName(t.gvr)] = true
	}
	w.informer = metadatainformer.NewFilteredMetadataInformer(client, CRDResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	// Only the name is read: drop the rest (annotations can hold a whole
	// CRD's last-applied configuration).
	_ = w.informer.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta,
				ObjectMeta: metav1.ObjectMeta{Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}}, nil
		}
		return obj, nil
	})
	var warned atomic.Bool
	_ = w.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		if ctx.Err() != nil {
			return
		}
		if (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err)) && warned.CompareAndSwap(false, true) {
			s.log.Warn("cannot watch CustomResourceDefinitions: a CRD installed or deleted later is noticed only by the discovery poll",
				"interval", s.discoveryInterval.String(), "error", err.Error(),
				"fix", "grant deputy's identity get, list and watch on customresourcedefinitions (apiextensions.k8s.io), as manifests/base/rbac.yaml does")
			return
		}
		s.log.Debug("watching CustomResourceDefinitions failed; retrying", "error", err.Error())
	})
	onEvent := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok && w.names[m.Name] {
			s.RefreshResources()
		}
	}
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onEvent,
		UpdateFunc: func(_, obj any) { onEvent(obj) },
		DeleteFunc: onEvent,
	})
	return w
}

// crdsAgree reports whether discovery agrees with the CRD watch about the
// CRDs the source cares about: each one the watch sees is served, and each
// one it does not see is not. A CRD is served a moment after it is created
// (and stops a moment after it is deleted): until then discovery is asked
// again with a short backoff. True without a watch or before it has listed.
func (s *Source) crdsAgree() bool {
	if s.crds == nil || !s.crds.informer.HasSynced() {
		return true
	}
	store := s.crds.informer.GetStore()
	s.mu.Lock()
	defer s.mu.Unlock()
	agree := func(gvr schema.GroupVersionResource, state groupState) bool {
		_, exists, _ := store.GetByKey(crdName(gvr))
		return exists == (state == groupPresent)
	}
	for _, g := range s.groups {
		if !agree(g.gvr, g.state) {
			return false
		}
	}
	for _, t := range s.tracked {
		if !agree(t.gvr, t.state) {
			return false
		}
	}
	return true
}

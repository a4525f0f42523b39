package clustersource

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"deputy.dev/deputy/policy"
)

// discoveryLoop checks the AppProject CRDs (and the tracked resources) now
// and then every discoveryInterval; at once when a CRD the source cares
// about is created, changed or deleted (the CRD watch) or an AppProject
// informer got NotFound; and sooner while a presence is still unknown or
// discovery does not agree yet with the CRDs the watch sees (kube-apiserver
// serves a new CRD a moment after creating it).
func (s *Source) discoveryLoop(ctx context.Context) {
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
func (s *Source) RefreshResources() {
	select {
	case s.rediscover <- struct{}{}:
	default:
	}
}

// discoverResources reads every served resource's kind and scope into the
// catalog, and asks for a rebuild when it changed. A partial answer (an
// aggregated API that is down) keeps what the last catalog knew of the
// groups that failed.
func (s *Source) discoverResources(ctx context.Context) {
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
	next := policy.BuiltinResources().Merge(policy.CatalogFromDiscovery(lists))
	if err != nil {
		next = prev.Merge(policy.CatalogFromDiscovery(lists))
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
func (s *Source) discover(ctx context.Context) bool {
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

func (s *Source) namespacesAttr() string {
	if len(s.namespaces) == 0 {
		return "all"
	}
	return strings.Join(s.namespaces, ",")
}

// crdInstalled reports whether discovery serves gvr.
func (s *Source) crdInstalled(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
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
func (s *Source) startGroup(ctx context.Context, g *projectGroup) {
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
func (s *Source) stopGroup(g *projectGroup, state groupState) {
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

func (s *Source) stopGroups() {
	for _, g := range s.groups {
		s.mu.Lock()
		state := g.state
		s.mu.Unlock()
		s.stopGroup(g, state)
	}
}

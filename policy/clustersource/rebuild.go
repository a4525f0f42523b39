package clustersource

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// kick asks for a rebuild; it never blocks, and kicks before the rebuild
// starts reading the informers' stores coalesce.
func (s *Source) kick() {
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
func (s *Source) rebuildLoop(ctx context.Context) {
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
func (s *Source) rebuild() {
	groups := s.groupSnapshot()
	if !s.everSynced {
		if !s.syncedNow(groups) {
			return
		}
		s.everSynced = true
	}
	start := time.Now()
	objs := policy.RBACObjects{
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
	rbac, err := policy.NewRBAC(objs, false) // the controller-manager aggregated the ClusterRoles already
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
	s.swap(&policy.ClusterState{RBAC: rbac, Projects: projects, Synced: true, Resources: resources})

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

func (s *Source) swap(state *policy.ClusterState) {
	s.listenersMu.Lock()
	defer s.listenersMu.Unlock()
	s.current.Store(state)
	for _, f := range s.listeners {
		f(state)
	}
}

// OnChange registers f to be called with every new state right after it is
// swapped in (as policy.FileSource.OnChange), from the source's rebuild
// goroutine, in the order registered: f must not block.
func (s *Source) OnChange(f func(*policy.ClusterState)) {
	s.listenersMu.Lock()
	defer s.listenersMu.Unlock()
	s.listeners = append(s.listeners, f)
}

func listenersOf(f func(*policy.ClusterState)) []func(*policy.ClusterState) {
	if f == nil {
		return nil
	}
	return []func(*policy.ClusterState){f}
}

// groupView is what the rebuild needs of a projectGroup, copied under s.mu.
type groupView struct {
	group     string
	state     groupState
	informers []cache.SharedIndexInformer
}

func (s *Source) groupSnapshot() []groupView {
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
func (s *Source) syncedNow(groups []groupView) bool {
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
func (s *Source) projects(groups []groupView) ([]policy.Project, int) {
	var projects []policy.Project
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
						c.project = &policy.Project{Group: g.group, Object: p, Source: "cluster"}
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
		slices.SortFunc(projects[start:], func(a, b policy.Project) int {
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
// (policy.DecodeAppProject), then validates it.
func appProjectFromUnstructured(group string, u *unstructured.Unstructured) (*v1alpha1.AppProject, error) {
	data, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	p, err := policy.DecodeAppProject(group, data)
	if err != nil {
		return nil, err
	}
	if errs, _ := policy.ValidateAppProject(p); len(errs) > 0 {
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

func emptyRBAC() *policy.RBAC {
	r, _ := policy.NewRBAC(policy.RBACObjects{}, false)
	return r
}

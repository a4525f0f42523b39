package authorizer

import (
	"fmt"
	"slices"

	"deputy.dev/deputy/policy"
)

// gateIndex is the per-snapshot view of the gate: compiled AppProjects per
// impersonator, indexed by the ServiceAccount names they derive.
type gateIndex struct {
	file          *policy.Snapshot
	cluster       *policy.ClusterState
	synced        bool
	fileRBAC      *policy.RBAC
	clusterRBAC   *policy.RBAC
	impersonators map[string]*impersonatorIndex
	// resources is the catalog requests without a namespace are decided by:
	// the cluster's (discovery) in cluster mode, over the file snapshot's
	// (built-in kinds and the policy's CustomResourceDefinitions).
	resources *policy.ResourceCatalog
}

func (idx *gateIndex) lookupResource(group, resource string) (policy.ResourceInfo, bool) {
	return idx.resources.Lookup(group, resource)
}

type impersonatorIndex struct {
	cfg      *Impersonator
	projects []gateProject
	// byTarget maps "namespace/name" to the projects with an entry that
	// derives exactly that ServiceAccount; byWildName maps a name to the
	// projects with an entry deriving it in a namespace that depends on the
	// destination. Together they are every project that can derive a
	// ServiceAccount, so decideServiceAccount checks only those.
	byTarget   map[string][]int
	byWildName map[string][]int
	appNS      map[string]bool
	// destLiteral maps a namespace to the projects with a plain destination
	// entry of exactly that namespace; destPattern lists the projects with a
	// wildcard or negated one. Together they are every project that can
	// permit a namespace, so decideAction checks only those.
	destLiteral map[string][]int
	destPattern []int
}

type gateProject struct {
	ref      string // `AppProject argoproj.io argocd/guestbook`
	project  *policy.Project
	compiled *policy.CompiledProject
	// isAppNamespace reports whether an Application of this project, synced
	// by this impersonator, can live in a namespace: one of the
	// impersonator's ApplicationNamespaces that the project admits (its own
	// namespace, or spec.sourceNamespaces). It is where a destination
	// without a namespace derives a bare-name ServiceAccount.
	isAppNamespace func(string) bool
}

// currentIndex returns the index for the current snapshot and cluster state,
// rebuilding it (once, under the lock) when either changed.
func (g *Gate) currentIndex() *gateIndex {
	file := g.file()
	var cluster *policy.ClusterState
	if g.cluster != nil {
		cluster = g.cluster()
	}
	if idx := g.index.Load(); idx != nil && idx.file == file && idx.cluster == cluster {
		return idx
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if idx := g.index.Load(); idx != nil && idx.file == file && idx.cluster == cluster {
		return idx
	}
	idx := g.buildIndex(file, cluster)
	g.index.Store(idx)
	return idx
}

func (g *Gate) buildIndex(file *policy.Snapshot, cluster *policy.ClusterState) *gateIndex {
	idx := &gateIndex{file: file, cluster: cluster, synced: g.cluster == nil || (cluster != nil && cluster.Synced),
		impersonators: make(map[string]*impersonatorIndex, len(g.opts.Impersonators))}
	var projects []policy.Project
	if file != nil {
		idx.fileRBAC = file.RBAC
		idx.resources = file.Resources
		projects = append(projects, file.Projects...)
	}
	if cluster != nil {
		idx.clusterRBAC = cluster.RBAC
		idx.resources = idx.resources.Merge(cluster.Resources)
		projects = append(projects, cluster.Projects...)
	}
	compiled := make([]*policy.CompiledProject, len(projects))
	for i := range projects {
		// A project that does not compile grants nothing (fail closed);
		// admission and `deputy validate` report it.
		compiled[i], _ = policy.CompileAppProject(projects[i].Object)
	}
	for i := range g.opts.Impersonators {
		cfg := &g.opts.Impersonators[i]
		ix := &impersonatorIndex{cfg: cfg, byTarget: map[string][]int{}, byWildName: map[string][]int{}, appNS: set(cfg.ApplicationNamespaces), destLiteral: map[string][]int{}}
		for j := range projects {
			p := &projects[j]
			if compiled[j] == nil || !slices.Contains(cfg.APIGroups, p.Group) ||
				(len(cfg.Namespaces) > 0 && !slices.Contains(cfg.Namespaces, p.Object.Namespace)) {
				continue
			}
			n := len(ix.projects)
			c := compiled[j]
			ix.projects = append(ix.projects, gateProject{
				ref:            fmt.Sprintf("AppProject %s %s/%s", p.Group, p.Object.Namespace, p.Object.Name),
				project:        p,
				compiled:       c,
				isAppNamespace: func(ns string) bool { return ix.appNS[ns] && c.AppNamespacePermitted(ns) },
			})
			literals, patterns := compiled[j].DestinationNamespaceIndex()
			for _, ns := range literals {
				if l := ix.destLiteral[ns]; len(l) == 0 || l[len(l)-1] != n {
					ix.destLiteral[ns] = append(l, n)
				}
			}
			if patterns {
				ix.destPattern = append(ix.destPattern, n)
			}
			for _, t := range compiled[j].ServiceAccountTargets() {
				m, key := ix.byWildName, t.Name
				if t.Namespace != "" {
					m, key = ix.byTarget, t.Namespace+"/"+t.Name
				}
				if l := m[key]; len(l) == 0 || l[len(l)-1] != n {
					m[key] = append(l, n)
				}
			}
		}
		idx.impersonators[cfg.UserName] = ix
	}
	return idx
}

// Refresh rebuilds the index for the current snapshot and cluster state now
// (sources call it after a swap), so that no request pays for the rebuild.
func (g *Gate) Refresh() { g.currentIndex() }

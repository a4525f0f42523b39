package syncer

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/syncer/health"
	"deputy.dev/deputy/syncer/source"
	"deputy.dev/deputy/syncer/waves"
)

// Prune deletes exactly the objects that carry this Application's tracking
// annotation value and that the sync no longer renders; never an object
// without the annotation (whatever its labels), never one with another
// Application's value, never one a controller owns (a Deployment's
// ReplicaSets inherit its annotations), and never the namespace that
// CreateNamespace=true created (it carries no annotation). It looks where
// the Application's objects can be: see pruneScopes.

// pruneCandidate is an object prune would delete.
type pruneCandidate struct {
	scope     pruneScope
	namespace string
	name      string
	uid       types.UID
	// wave is the live object's sync wave: prune deletes the highest wave
	// first.
	wave int
}

func (c *pruneCandidate) key() objKey {
	return objKey{group: c.scope.gvk.Group, kind: c.scope.gvk.Kind, namespace: c.namespace, name: c.name}
}

// selectPruneCandidates picks, from one listed scope, the objects to prune:
// hooks, and objects already being deleted, only when deleting
// (DeleteResources deletes every tracked object and waits until each is
// gone; a sync never prunes a hook, which it creates anew each time).
func selectPruneCandidates(scope pruneScope, items []metav1.PartialObjectMetadata, tracking string, rendered map[objKey]bool, deleting bool) []*pruneCandidate {
	var out []*pruneCandidate
	for i := range items {
		it := &items[i]
		if it.Annotations[TrackingAnnotation] != tracking || !deleting && it.DeletionTimestamp != nil {
			continue
		}
		if metav1.GetControllerOfNoCopy(it) != nil || !deleting && waves.IsHook(it.Annotations) {
			continue
		}
		c := &pruneCandidate{scope: scope, namespace: it.Namespace, name: it.Name, uid: it.UID, wave: waves.WaveOf(it.Annotations)}
		if rendered[c.key()] {
			continue
		}
		out = append(out, c)
	}
	return out
}

func keyLess(a, b objKey) bool {
	switch {
	case a.group != b.group:
		return a.group < b.group
	case a.kind != b.kind:
		return a.kind < b.kind
	case a.namespace != b.namespace:
		return a.namespace < b.namespace
	}
	return a.name < b.name
}

// pruneOffMessage is the message of the PruneSkipped result of an object
// prune would delete, in a sync without prune; pruneOffPrefix starts it
// and its variant naming syncOptions Prune=false.
const (
	pruneOffMessage = pruneOffPrefix + ")"
	pruneOffPrefix  = "would be pruned (prune is off"
)

// prune deletes the candidates after a successful apply; after a failed one,
// or in a dry run, it only reports them (PruneSkipped). Without prune it
// reports what prune would delete (reportOrphans).
func (op *operation) prune(ctx context.Context, cl *clients, p *plan, pf *preflightResult) {
	if len(p.orphanScopes) > 0 {
		op.reportOrphans(ctx, cl, p)
		return
	}
	if len(pf.candidates) == 0 {
		return
	}
	failed := op.countFailed()
	op.mu.Lock()
	failure := op.failure
	op.mu.Unlock()
	switch {
	case op.req.Sync.DryRun:
		for _, c := range pf.candidates {
			op.record(-1, c.result(v1alpha1.ResultCodePruneSkipped, "would be pruned (dry run)"))
		}
	case failure != "" && failed == 0:
		for _, c := range pf.candidates {
			op.record(-1, c.result(v1alpha1.ResultCodePruneSkipped, "not pruned: the sync failed before prune ("+failure+")"))
		}
	case failed > 0:
		for _, c := range pf.candidates {
			op.record(-1, c.result(v1alpha1.ResultCodePruneSkipped, fmt.Sprintf("not pruned: %d resources failed to sync, and prune runs only after every resource applied", failed)))
		}
	default:
		op.deleteCandidates(ctx, cl, pf.candidates)
	}
}

// reportOrphans, in a sync without prune, lists (metadata only, as the
// operation's identity) where the Application's objects can be, and reports
// each object prune would delete as PruneSkipped "would be pruned (prune is
// off)": such an object keeps the Application OutOfSync (SyncStatusAfter),
// as Argo CD's requiresPruning does. Best effort: prune's list permission is
// not required without prune, so a place the identity may not list is
// skipped (and logged at debug level); nothing is deleted.
func (op *operation) reportOrphans(ctx context.Context, cl *clients, p *plan) {
	targets := make([]listTarget, 0, len(p.orphanScopes))
	for _, s := range p.orphanScopes {
		targets = append(targets, listTarget{gvk: s.gvk, gvr: s.gvr, namespace: s.namespace, prune: true})
	}
	seen, problems := op.observe(ctx, cl, targets, p.rendered)
	if len(problems) > 0 {
		op.log.V(1).Info("prune is off: objects prune would delete are not reported where they cannot be listed", "problems", problems)
	}
	msg := pruneOffMessage
	if op.options.pruneDisabled {
		msg = pruneOffPrefix + ": syncOptions Prune=false)"
	}
	for _, c := range seen.candidates {
		op.record(-1, c.result(v1alpha1.ResultCodePruneSkipped, msg))
	}
}

// deleteCandidates deletes in the reverse of the sync's order: the highest
// sync wave first (Argo CD prunes in reverse wave order), and within a wave
// namespaced objects first, Namespaces last, each group in parallel. When a
// lower wave follows, it waits until the wave's objects are gone. The UID
// precondition makes sure the object deleted is the one listed. It returns
// the candidates deleted (or found already deleted).
func (op *operation) deleteCandidates(ctx context.Context, cl *clients, cands []*pruneCandidate) (deleted []*pruneCandidate) {
	var permitted []*pruneCandidate
	for _, c := range cands {
		// What the project no longer permits is not deleted, whoever acts:
		// the impersonation gate would refuse it, and without impersonation
		// the engine is the only check.
		if perm := policy.ResourcePermitted(op.project, c.scope.gvk.Group, c.scope.gvk.Kind, c.name, c.namespace != ""); !perm.Permitted {
			op.record(-1, c.result(v1alpha1.ResultCodePruneSkipped, fmt.Sprintf("not pruned: project %s does not permit it (AppProject spec: %s)", op.project.Name, perm.Entry)))
			continue
		}
		permitted = append(permitted, c)
	}
	sort.SliceStable(permitted, func(i, j int) bool {
		a, b := permitted[i], permitted[j]
		if a.wave != b.wave {
			return a.wave > b.wave
		}
		return a.applyGroup() > b.applyGroup()
	})
	for i := 0; i < len(permitted); {
		j := i + 1
		for j < len(permitted) && permitted[j].wave == permitted[i].wave && permitted[j].applyGroup() == permitted[i].applyGroup() {
			j++
		}
		list := permitted[i:j]
		ok := make([]bool, len(list))
		parallel(len(list), op.e.opts.Parallelism, func(i int) { ok[i] = op.deleteOne(ctx, cl, list[i]) },
			func(i int, r any) {
				op.record(-1, list[i].result(v1alpha1.ResultCodeSyncFailed, fmt.Sprintf("internal error in deputy's sync engine: %v", r)))
			})
		for k, c := range list {
			if ok[k] {
				deleted = append(deleted, c)
			}
		}
		if j < len(permitted) && permitted[j].wave != list[0].wave {
			op.waitGone(ctx, cl, permitted[:j])
		}
		i = j
	}
	return deleted
}

// waitGone waits (within the health timeout) until the deleted candidates
// are gone, before prune moves to a lower wave.
func (op *operation) waitGone(ctx context.Context, cl *clients, cands []*pruneCandidate) {
	timeout, err := op.healthTimeout()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	parallel(len(cands), maxWatches, func(i int) {
		c := cands[i]
		_ = health.Follow(ctx, cl.dyn.Resource(c.scope.gvr).Namespace(c.namespace), c.name, "", func(u *unstructured.Unstructured) bool {
			return u == nil || u.GetUID() != c.uid
		})
	}, func(int, any) {})
}

// deleteOne deletes c and records the result; true when it is deleted (or
// was already).
func (op *operation) deleteOne(ctx context.Context, cl *clients, c *pruneCandidate) bool {
	uid := c.uid
	// Background propagation (kubectl delete's default): the object is gone
	// when prune reports it Pruned, and the garbage collector removes what it
	// owns. Foreground would leave it in place, with a finalizer, until its
	// dependents are gone, and for ever where no garbage collector runs.
	propagation := cmp.Or(op.options.propagation, metav1.DeletePropagationBackground)
	err := cl.meta.Resource(c.scope.gvr).Namespace(c.namespace).Delete(ctx, c.name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: &propagation,
	})
	switch {
	case err == nil:
		op.record(-1, c.result(v1alpha1.ResultCodePruned, "pruned"))
	case apierrors.IsNotFound(err):
		op.record(-1, c.result(v1alpha1.ResultCodePruned, "already deleted"))
	case apierrors.IsConflict(err):
		op.record(-1, c.result(v1alpha1.ResultCodePruneSkipped, "not pruned: the object was replaced after it was listed"))
	default:
		op.record(-1, c.result(v1alpha1.ResultCodeSyncFailed, err.Error()))
	}
	return err == nil || apierrors.IsNotFound(err)
}

func (c *pruneCandidate) applyGroup() applyGroup {
	switch {
	case c.scope.gvk.Group == "" && c.scope.gvk.Kind == "Namespace":
		return groupNamespaces
	case c.scope.gvk.Group == "apiextensions.k8s.io" && c.scope.gvk.Kind == "CustomResourceDefinition":
		return groupCRDs
	case c.namespace == "":
		return groupCluster
	}
	return groupNamespaced
}

func (c *pruneCandidate) result(status, message string) *v1alpha1.ResourceResult {
	return &v1alpha1.ResourceResult{Group: c.scope.gvk.Group, Version: c.scope.gvk.Version, Kind: c.scope.gvk.Kind,
		Namespace: c.namespace, Name: c.name, Status: status, Message: message}
}

func (op *operation) countFailed() int {
	op.mu.Lock()
	defer op.mu.Unlock()
	n := 0
	for _, r := range op.slots {
		if r != nil && r.Status == v1alpha1.ResultCodeSyncFailed {
			n++
		}
	}
	return n
}

// deleteAll is DeleteResources: the same checks and identity as a sync,
// then every tracked object of the recorded kinds is deleted.
func (op *operation) deleteAll(ctx context.Context) {
	op.deleting = true
	if err := op.validate(); err != nil {
		op.fail(err)
		return
	}
	if err := op.resolveDestination(ctx); err != nil {
		op.fail(err)
		return
	}
	compiled, err := op.compileProject()
	if err != nil {
		op.fail(err)
		return
	}
	id, cl, err := op.impersonate(ctx, compiled)
	if err != nil {
		op.fail(err)
		return
	}
	p := &plan{rendered: map[objKey]bool{}, createSlot: -1}
	p.objects = op.renderedKinds(ctx, cl, compiled)
	p.pruneScopes = op.pruneScopes(ctx, cl.mapper, compiled, p)
	p.objects = nil // nothing is applied, and every tracked object goes
	pf, err := op.preflight(ctx, cl, id, p)
	if err != nil {
		op.fail(err)
		return
	}
	deleted := op.deleteCandidates(ctx, cl, pf.candidates)
	op.confirmGone(ctx, cl, p, deleted)
}

// confirmGone waits (within the health timeout; best effort: it needs get
// and watch) until the deleted objects are gone, then lists the prune
// scopes again (list is what the preflight required): an object deleted
// but still there, with this Application's tracking value, turns its
// Pruned result into a failure naming its finalizers.
func (op *operation) confirmGone(ctx context.Context, cl *clients, p *plan, deleted []*pruneCandidate) {
	if len(deleted) == 0 || ctx.Err() != nil {
		return
	}
	op.waitGone(ctx, cl, deleted)
	timeout, _ := op.healthTimeout()
	var targets []listTarget
	for _, s := range p.pruneScopes {
		targets = append(targets, listTarget{gvk: s.gvk, gvr: s.gvr, namespace: s.namespace, prune: true})
	}
	seen, problems := op.observe(ctx, cl, targets, p.rendered)
	if len(problems) > 0 {
		op.fail(fmt.Errorf("deleted %d resources but could not confirm they are gone: %s", len(deleted), strings.Join(problems, "; ")))
		return
	}
	left := map[types.UID]bool{}
	for _, c := range seen.candidates {
		left[c.uid] = true
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	for _, c := range deleted {
		if !left[c.uid] {
			continue
		}
		for i, r := range op.extra {
			if r.Status == v1alpha1.ResultCodePruned && r.Group == c.scope.gvk.Group && r.Kind == c.scope.gvk.Kind && r.Namespace == c.namespace && r.Name == c.name {
				op.extra[i] = c.result(v1alpha1.ResultCodeSyncFailed, fmt.Sprintf("deleted (propagationPolicy %s) but still present after %s: a finalizer holds it (foregroundDeletion is removed by kube-controller-manager's garbage collector once its dependents are gone)", op.options.propagation, timeout))
			}
		}
	}
}

// renderedKinds renders the source (best effort: when the project permits
// it and it renders) so that deletion also looks at the kinds and namespaces
// the source holds now, not only those the last operation recorded (which
// is empty when that operation ended in Error). The objects returned carry
// only what pruneScopes reads.
func (op *operation) renderedKinds(ctx context.Context, cl *clients, compiled *policy.CompiledProject) []*planObject {
	if checkSources(compiled, op.app) != nil {
		return nil
	}
	r, err := source.RenderApplication(ctx, op.e.sources, cluster.AppWithCapabilities(op.app, cl.capabilities), v1alpha1.SyncOperation{},
		source.WithProject(op.project.Name, op.project.Spec.SourceRepos))
	if err != nil {
		op.log.Info("deleting: the source does not render; looking only where the last operation recorded objects", "error", err.Error())
		return nil
	}
	var out []*planObject
	for _, u := range r.Objects {
		gvk := u.GroupVersionKind()
		m, err := cl.mapper.RESTMappingWithContext(ctx, gvk.GroupKind(), gvk.Version)
		if err != nil {
			continue
		}
		o := &planObject{obj: u, gvk: gvk, gvr: m.Resource, namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}
		switch {
		case !o.namespaced:
			u.SetNamespace("")
		case u.GetNamespace() == "":
			u.SetNamespace(op.destNamespace)
		}
		out = append(out, o)
	}
	return out
}

package syncer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	pathvalidation "k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/waves"
)

// applyGroup is what kind of object a plan object is, for the steps that
// depend on it: a CustomResourceDefinition is waited for until Established,
// and prune deletes namespaced objects first and Namespaces last.
type applyGroup int

const (
	groupNamespaces applyGroup = iota // Namespaces
	groupCRDs                         // CustomResourceDefinitions (then wait for Established)
	groupCluster                      // other cluster-scoped objects
	groupNamespaced                   // namespaced objects
)

func (g applyGroup) String() string {
	return [...]string{"namespaces", "custom resource definitions", "cluster-scoped", "namespaced"}[g]
}

// objKey identifies an object across versions.
type objKey struct {
	group, kind, namespace, name string
}

func (k objKey) String() string {
	s := k.kind
	if k.group != "" {
		s += "." + k.group
	}
	if k.namespace != "" {
		return s + " " + k.namespace + "/" + k.name
	}
	return s + " " + k.name
}

// planObject is one rendered object with its REST mapping.
type planObject struct {
	obj        *unstructured.Unstructured
	gvk        schema.GroupVersionKind
	gvr        schema.GroupVersionResource
	namespaced bool
	// crdDefined: the mapping comes from a CustomResourceDefinition of this
	// sync, not (yet) from discovery.
	crdDefined bool
	group      applyGroup
	rank       int
	key        objKey
	slot       int
	// phase and wave place it in the sync (package waves); hook: it is a
	// hook of phase (created each sync, waited for until it completes,
	// never pruned), with place's delete policies; generated: a hook named
	// by metadata.generateName (the server names it when it is created).
	phase     string
	wave      int
	hook      bool
	generated bool
	place     waves.Placement
	// live is the object as the apply (or create) returned it, when its
	// health or hook phase is read from it; liveRV the resourceVersion to
	// watch it from; createdName the name the server gave a generated hook.
	live        *unstructured.Unstructured
	liveRV      string
	createdName string
	// body is the server-side apply request body; digest its
	// appliedDigestAnnotation.
	body   []byte
	digest string
	// unchanged: the live object is what body would make it (the preflight
	// decided), so no request is sent.
	unchanged bool
}

func (o *planObject) namespace() string { return o.obj.GetNamespace() }
func (o *planObject) name() string {
	if o.createdName != "" {
		return o.createdName
	}
	return o.obj.GetName()
}

func (o *planObject) result(status, message string) *v1alpha1.ResourceResult {
	r := &v1alpha1.ResourceResult{Group: o.gvk.Group, Version: o.gvk.Version, Kind: o.gvk.Kind,
		Namespace: o.namespace(), Name: o.name(), Status: status, Message: message,
		SyncPhase: o.phase, SyncWave: int64(o.wave)}
	if o.hook {
		r.HookType = o.phase
		if r.Name == "" {
			r.Name = o.obj.GetGenerateName()
		}
	}
	return r
}

// pruneScope is one (resource, namespace) to list for prune ("" namespace
// for cluster-scoped kinds).
type pruneScope struct {
	gvk       schema.GroupVersionKind
	gvr       schema.GroupVersionResource
	namespace string
}

// plan is an operation's objects in apply order.
type plan struct {
	objects  []*planObject
	rendered map[objKey]bool
	// createNamespace is the destination namespace when CreateNamespace=true.
	createNamespace string
	createSlot      int
	// pruneScopes are listed for objects to prune (when prune is on).
	pruneScopes []pruneScope
	// orphanScopes are the same places when prune is off: listed after the
	// apply, where the identity may, to report what prune would delete.
	orphanScopes []pruneScope
}

// crdInfo is what a CustomResourceDefinition of this sync says about its kind.
type crdInfo struct {
	plural     string
	namespaced bool
	versions   map[string]bool
}

// renderedCRDs indexes the CustomResourceDefinitions among objs by the kind
// they define.
func renderedCRDs(objs []*unstructured.Unstructured) map[schema.GroupKind]crdInfo {
	out := map[schema.GroupKind]crdInfo{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if gvk.Group != "apiextensions.k8s.io" || gvk.Kind != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
		scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		info := crdInfo{plural: plural, namespaced: scope == "Namespaced", versions: map[string]bool{}}
		for _, v := range versions {
			vm, ok := v.(map[string]any)
			if !ok {
				continue
			}
			name, _ := vm["name"].(string)
			served, _ := vm["served"].(bool)
			if name != "" && served {
				info.versions[name] = true
			}
		}
		if kind != "" && plural != "" {
			out[schema.GroupKind{Group: group, Kind: kind}] = info
		}
	}
	return out
}

// plan maps every rendered object to its resource (discovery made as the
// operation's identity, or a CustomResourceDefinition of the same sync),
// defaults namespaces, adds the tracking annotation, and checks each object
// against the project: its kind (clusterResourceWhitelist / namespaced
// white- and blacklists, with the real scope) and, for namespaced objects,
// its namespace as a destination (Argo CD checks both per resource). Every
// violation is reported at once.
func (op *operation) plan(ctx context.Context, cl *clients, compiled *policy.CompiledProject, objs []*unstructured.Unstructured) (*plan, error) {
	p := &plan{rendered: make(map[objKey]bool, len(objs)), createSlot: -1}
	op.options = parseSyncOptions(op.app.Spec.SyncPolicy)
	crds := renderedCRDs(objs)
	var problems []string
	if op.options.createNamespace && op.destNamespace != "" {
		// The Namespace CreateNamespace=true creates is a cluster-scoped
		// object like any other: the project must permit it (the
		// impersonation gate asks the same of the create).
		if perm := policy.ResourcePermitted(op.project, "", "Namespace", op.destNamespace, false); !perm.Permitted {
			problems = append(problems, fmt.Sprintf("syncOptions CreateNamespace=true creates Namespace %s, which project %s does not permit (AppProject spec: %s): add {group: \"\", kind: Namespace} (or its name) to the AppProject's clusterResourceWhitelist, or create the namespace and drop the option",
				op.destNamespace, op.project.Name, perm.Entry))
		}
	}
	for _, u := range objs {
		place, err := waves.Place(u)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s %q (apiVersion %s): %v", u.GetKind(), cmp.Or(u.GetName(), u.GetGenerateName()), u.GetAPIVersion(), err))
			continue
		}
		if len(place.Phases) == 0 {
			continue // Skip, or a hook no sync runs
		}
		o, problem := op.planOne(ctx, cl.mapper, compiled, crds, u, place.Hook)
		if problem != "" {
			problems = append(problems, problem)
			continue
		}
		if p.rendered[o.key] {
			problems = append(problems, fmt.Sprintf("%s is rendered more than once: keep one", o.key))
			continue
		}
		p.rendered[o.key] = true
		for _, phase := range place.Phases {
			c := *o
			c.phase, c.wave, c.hook, c.place = phase, place.Wave, place.Hook, place
			p.objects = append(p.objects, &c)
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("the manifests break AppProject %q or cannot be applied (%d problems; nothing was changed):\n  - %s",
			op.project.Name, len(problems), strings.Join(problems, "\n  - "))
	}
	sortPlan(p.objects)

	if op.options.createNamespace && op.destNamespace != "" && !p.rendered[objKey{kind: "Namespace", name: op.destNamespace}] {
		p.createNamespace = op.destNamespace
		p.createSlot = op.reserve(1)
	}
	first := op.reserve(len(p.objects))
	for i, o := range p.objects {
		o.slot = first + i
	}
	if op.pruneEnabled() {
		p.pruneScopes = op.pruneScopes(ctx, cl.mapper, compiled, p)
	} else {
		p.orphanScopes = op.pruneScopes(ctx, cl.mapper, compiled, p)
	}
	return p, nil
}

// planOne maps and checks one object; a non-empty problem rejects it.
func (op *operation) planOne(ctx context.Context, mapper meta.RESTMapperWithContext, compiled *policy.CompiledProject, crds map[schema.GroupKind]crdInfo, u *unstructured.Unstructured, hook bool) (*planObject, string) {
	gvk := u.GroupVersionKind()
	o := &planObject{obj: u, gvk: gvk}
	what := fmt.Sprintf("%s %q (apiVersion %s)", gvk.Kind, cmp.Or(u.GetName(), u.GetGenerateName()), u.GetAPIVersion())
	switch {
	case u.GetName() == "" && u.GetGenerateName() != "" && hook:
		// A hook may be named by the server (Argo CD's hooks with
		// generateName): it is created, not applied.
		o.generated = true
		if msgs := pathvalidation.IsValidPathSegmentName(u.GetGenerateName()); len(msgs) > 0 {
			return nil, fmt.Sprintf("%s has an invalid metadata.generateName: %s", what, strings.Join(msgs, "; "))
		}
	case u.GetName() == "" && u.GetGenerateName() != "":
		return nil, what + " uses metadata.generateName: server-side apply needs metadata.name (only a hook may use generateName)"
	case u.GetName() == "":
		return nil, what + " has no metadata.name"
	default:
		if msgs := pathvalidation.IsValidPathSegmentName(u.GetName()); len(msgs) > 0 {
			return nil, fmt.Sprintf("%s has an invalid name: %s", what, strings.Join(msgs, "; "))
		}
	}
	mapping, err := mapper.RESTMappingWithContext(ctx, gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		o.gvr = mapping.Resource
		o.namespaced = mapping.Scope.Name() == meta.RESTScopeNameNamespace
	case crds[gvk.GroupKind()].versions[gvk.Version]:
		info := crds[gvk.GroupKind()]
		o.gvr = gvk.GroupVersion().WithResource(info.plural)
		o.namespaced = info.namespaced
		o.crdDefined = true
	default:
		return nil, fmt.Sprintf("%s: the cluster does not serve kind %s in %s, and no CustomResourceDefinition of this sync defines it", what, gvk.Kind, gvk.GroupVersion())
	}

	if o.namespaced {
		if u.GetNamespace() == "" {
			if op.destNamespace == "" {
				return nil, what + " is namespaced but has no namespace, and the Application's spec.destination.namespace is empty: set one of them"
			}
			u.SetNamespace(op.destNamespace)
		}
		if msgs := pathvalidation.IsValidPathSegmentName(u.GetNamespace()); len(msgs) > 0 {
			return nil, fmt.Sprintf("%s has an invalid namespace: %s", what, strings.Join(msgs, "; "))
		}
	} else {
		u.SetNamespace("")
	}
	o.key = objKey{group: gvk.Group, kind: gvk.Kind, namespace: u.GetNamespace(), name: u.GetName()}
	if o.generated {
		// No live object has this name ("*" is not valid in one).
		o.key.name = u.GetGenerateName() + "*"
	}

	if perm := policy.ResourcePermitted(op.project, gvk.Group, gvk.Kind, u.GetName(), o.namespaced); !perm.Permitted {
		scope := "namespaced"
		if !o.namespaced {
			scope = "cluster-scoped"
		}
		return nil, fmt.Sprintf("resource %s:%s is not permitted in project %s (%s %s; AppProject spec: %s)", gvk.Group, gvk.Kind, op.project.Name, scope, o.key, perm.Entry)
	}
	if o.namespaced && !compiled.DestinationPermitted(op.server, op.clusterName, u.GetNamespace()) {
		return nil, fmt.Sprintf("namespace %s is not permitted in project '%s' (%s): add it to the AppProject's spec.destinations", u.GetNamespace(), op.project.Name, o.key)
	}

	switch {
	case gvk.Group == "" && gvk.Kind == "Namespace":
		o.group = groupNamespaces
	case gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition":
		o.group = groupCRDs
	case !o.namespaced:
		o.group = groupCluster
	default:
		o.group = groupNamespaced
	}
	o.rank = waves.KindRank(gvk.Kind)
	body, digest, err := prepareForApply(u, op.tracking)
	if err != nil {
		return nil, fmt.Sprintf("%s cannot be encoded: %v", what, err)
	}
	o.body, o.digest = body, digest
	return o, ""
}

// appliedDigestAnnotation records, on every object deputy applies, the
// SHA-256 of what was applied (the object with its tracking annotation,
// without this annotation). A later sync skips an object whose digest is the
// same and that nobody else has written since (see unchanged).
const appliedDigestAnnotation = "deputy.dev/applied-digest"

// prepareForApply adds the tracking annotation, drops the server-owned
// metadata a manifest may carry (a resourceVersion would make the apply
// conditional), and returns the request body with its digest annotated.
func prepareForApply(u *unstructured.Unstructured, tracking string) (body []byte, digest string, err error) {
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, appliedDigestAnnotation)
	ann[TrackingAnnotation] = tracking
	u.SetAnnotations(ann)
	for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw)
	digest = hex.EncodeToString(sum[:])
	ann[appliedDigestAnnotation] = digest
	u.SetAnnotations(ann)
	body, err = u.MarshalJSON()
	return body, digest, err
}

// sortPlan orders objects as Argo CD orders sync tasks (waves.Sort: phase,
// wave, kind order, name; Namespaces and CustomResourceDefinitions pulled to
// the first object that needs them, taking its phase and wave).
func sortPlan(objs []*planObject) {
	items := make([]*waves.Item, len(objs))
	for i, o := range objs {
		items[i] = &waves.Item{Phase: o.phase, Wave: o.wave, Group: o.key.group, Kind: o.key.kind,
			Namespace: o.key.namespace, Name: o.key.name, Index: i}
		if o.group == groupCRDs {
			group, _, _ := unstructured.NestedString(o.obj.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.obj.Object, "spec", "names", "kind")
			items[i].CRDGroupKind = group + "/" + kind
		}
	}
	waves.Sort(items)
	sorted := make([]*planObject, len(objs))
	for i, it := range items {
		o := objs[it.Index]
		o.phase, o.wave = it.Phase, it.Wave
		sorted[i] = o
	}
	copy(objs, sorted)
}

// step is the objects of one (phase, wave), in plan order.
type step struct {
	phase   string
	wave    int
	objects []*planObject
}

// steps splits sorted objects into runs of one (phase, wave).
func steps(objs []*planObject) []step {
	var out []step
	for i := 0; i < len(objs); {
		j := i + 1
		for j < len(objs) && objs[j].phase == objs[i].phase && objs[j].wave == objs[i].wave {
			j++
		}
		out = append(out, step{phase: objs[i].phase, wave: objs[i].wave, objects: objs[i:j]})
		i = j
	}
	return out
}

// runs splits one step's objects into runs of equal kind rank: each run is
// applied in parallel, the runs one after the other.
func runs(objs []*planObject) [][]*planObject {
	var out [][]*planObject
	for i := 0; i < len(objs); {
		j := i + 1
		for j < len(objs) && objs[j].rank == objs[i].rank {
			j++
		}
		out = append(out, objs[i:j])
		i = j
	}
	return out
}

// pruneEnabled: an explicit prune, or an automated sync with automated
// prune; never with syncOptions Prune=false.
func (op *operation) pruneEnabled() bool {
	if op.options.pruneDisabled {
		return false
	}
	if op.req.Sync.Prune {
		return true
	}
	sp := op.app.Spec.SyncPolicy
	return op.req.InitiatedBy.Automated && sp != nil && sp.Automated != nil && sp.Automated.Prune
}

// pruneScopes are where objects of this Application can be: the kinds
// rendered now plus the kinds the previous operation recorded, listed in
// the destination namespace, the namespaces rendered now and the ones
// recorded (those the project still permits), or cluster-wide for
// cluster-scoped kinds. Kinds the cluster no longer serves are skipped.
func (op *operation) pruneScopes(ctx context.Context, mapper meta.RESTMapperWithContext, compiled *policy.CompiledProject, p *plan) []pruneScope {
	type kindScope struct {
		gvk        schema.GroupVersionKind
		gvr        schema.GroupVersionResource
		namespaced bool
	}
	kinds := map[schema.GroupKind]kindScope{}
	namespaces := map[string]bool{}
	if op.destNamespace != "" {
		namespaces[op.destNamespace] = true
	}
	for _, o := range p.objects {
		if !o.crdDefined {
			kinds[o.gvk.GroupKind()] = kindScope{o.gvk, o.gvr, o.namespaced}
		}
		if o.namespaced {
			namespaces[o.namespace()] = true
		}
	}
	for _, r := range previousResults(op.app) {
		gk := schema.GroupKind{Group: r.Group, Kind: r.Kind}
		if _, ok := kinds[gk]; !ok {
			m, err := mapper.RESTMappingWithContext(ctx, gk, r.Version)
			if err != nil {
				m, err = mapper.RESTMappingWithContext(ctx, gk)
			}
			if err != nil {
				continue
			}
			kinds[gk] = kindScope{m.GroupVersionKind, m.Resource, m.Scope.Name() == meta.RESTScopeNameNamespace}
		}
		if r.Namespace != "" {
			namespaces[r.Namespace] = true
		}
	}
	var nsList []string
	for ns := range namespaces {
		if compiled.DestinationPermitted(op.server, op.clusterName, ns) {
			nsList = append(nsList, ns)
		}
	}
	sort.Strings(nsList)
	var out []pruneScope
	for _, k := range kinds {
		if !k.namespaced {
			out = append(out, pruneScope{gvk: k.gvk, gvr: k.gvr})
			continue
		}
		for _, ns := range nsList {
			out = append(out, pruneScope{gvk: k.gvk, gvr: k.gvr, namespace: ns})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.gvr.Group != b.gvr.Group {
			return a.gvr.Group < b.gvr.Group
		}
		if a.gvr.Resource != b.gvr.Resource {
			return a.gvr.Resource < b.gvr.Resource
		}
		return a.namespace < b.namespace
	})
	return out
}

// previousResults are the resources the Application's last operation
// recorded.
func previousResults(app *v1alpha1.Application) []*v1alpha1.ResourceResult {
	st := app.Status.OperationState
	if st == nil || st.SyncResult == nil {
		return nil
	}
	var out []*v1alpha1.ResourceResult
	for _, r := range st.SyncResult.Resources {
		if r != nil && r.Kind != "" {
			out = append(out, r)
		}
	}
	return out
}

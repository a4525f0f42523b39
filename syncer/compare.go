package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/diff"
	"deputy.dev/deputy/syncer/livestate"
)

// Diff implements Differ: it runs what a sync runs before it applies (the
// project checks, the derivation of the ServiceAccount and its enforcement,
// the render at req.Sync's revisions, the plan), lists where the rendered
// objects and the objects prune would delete live (whole objects where
// rendered objects live, metadata elsewhere), and asks the destination for
// a server-side dry-run apply of every rendered object that is not a hook,
// as the derived ServiceAccount: the server defaults, admits and merges
// exactly as a sync would. Each object's diff is live → dry-run answer
// (package diff: normalised, Secrets masked). Tracked objects no longer
// rendered are listed as prune whether or not the Application prunes.
// Nothing is changed. It runs within sync.limits.operationTimeout.
// req.Objects, when non-nil, replace the render (op.render).
//
// Errors: as Run's operation before it applies (invalid Application or
// project, a source that does not render, no ServiceAccount derived under
// enforcement, discovery or the destination unreachable); an object the
// server refuses is not an error but a ResourceDiff with Action error.
func (e *Engine) Diff(ctx context.Context, req DiffRequest) (out *v1alpha1.ApplicationDiff, err error) {
	err = e.beforeWrites(ctx, Request{Application: req.Application, Project: req.Project,
		Sync: v1alpha1.SyncOperation{Revision: req.Sync.Revision, Revisions: req.Sync.Revisions, Prune: true, DryRun: true}},
		func(op *operation) { op.diffing, op.local = true, req.Objects },
		func(ctx context.Context, op *operation, cl *clients, p *plan) (err error) {
			out, err = op.diff(ctx, cl, p)
			return err
		})
	return out, err
}

// beforeWrites runs what a sync runs before it writes (validate, prepare:
// the checks, the identity, the render, the plan) for an operation of req
// that mark makes a Diff or a Compare, then runs then, all within
// sync.limits.operationTimeout; a panic becomes an error.
func (e *Engine) beforeWrites(ctx context.Context, req Request, mark func(*operation), then func(context.Context, *operation, *clients, *plan) error) (err error) {
	op := e.newOperation(req, nil)
	mark(op)
	ctx, cancel := context.WithTimeout(ctx, e.opts.Source.Limits.OperationTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			op.log.Error(fmt.Errorf("panic: %v", r), "sync engine panicked before writing anything (diff or comparison)")
			err = fmt.Errorf("internal error in deputy's sync engine: %v", r)
		}
	}()
	if err := op.validate(); err != nil {
		return err
	}
	_, cl, p, err := op.prepare(ctx)
	if err != nil {
		return err
	}
	return then(ctx, op, cl, p)
}

// diff is Diff once the plan is made.
func (op *operation) diff(ctx context.Context, cl *clients, p *plan) (*v1alpha1.ApplicationDiff, error) {
	seen, problems := op.observe(ctx, cl, listTargets(p), p.rendered)
	out := &v1alpha1.ApplicationDiff{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.KindApplicationDiff,
		Namespace: op.app.Namespace, Name: op.app.Name, Warnings: problems}
	op.mu.Lock()
	out.Identity = op.state.Identity
	if r := op.state.SyncResult; r != nil {
		out.Revisions = r.RevisionList()
	}
	op.mu.Unlock()

	var objs []*planObject
	for _, o := range p.objects {
		if !o.hook {
			objs = append(objs, o)
		}
	}
	out.Resources = make([]v1alpha1.ResourceDiff, len(objs), len(objs)+len(seen.candidates))
	parallel(len(objs), op.e.opts.Parallelism, func(i int) {
		out.Resources[i] = op.diffOne(ctx, cl, p, seen, objs[i])
	}, func(i int, r any) {
		out.Resources[i] = resourceDiff(objs[i], v1alpha1.DiffActionError, "", fmt.Sprintf("internal error in deputy's sync engine: %v", r))
	})
	for _, c := range seen.candidates {
		out.Resources = append(out.Resources, v1alpha1.ResourceDiff{Group: c.scope.gvk.Group, Version: c.scope.gvk.Version, Kind: c.scope.gvk.Kind,
			Namespace: c.namespace, Name: c.name, Action: v1alpha1.DiffActionPrune})
	}
	return out, nil
}

// diffOne dry-runs one object's apply as the identity and compares the
// answer with the live object the lists returned.
func (op *operation) diffOne(ctx context.Context, cl *clients, p *plan, seen *observed, o *planObject) v1alpha1.ResourceDiff {
	live := seen.live[o.key]
	if other := live.trackedByOther(op.tracking); other != "" {
		return resourceDiff(o, v1alpha1.DiffActionError, "", trackedElsewhereMessage(o.key, other, op.tracking))
	}
	if !o.crdDefined && !seen.listed[scopeKey{o.gvr.Group, o.gvr.Resource, o.namespace()}] {
		return resourceDiff(o, v1alpha1.DiffActionError, "", fmt.Sprintf("cannot tell whether it exists: %s may not list %s (see the warnings)", cl.who, o.gvr.Resource))
	}
	var target *unstructured.Unstructured
	raw, _, err := cl.apply(ctx, o.gvr, o.namespace(), o.name(), o.body, true)
	switch {
	case err == nil:
		target = &unstructured.Unstructured{}
		if err := target.UnmarshalJSON(raw); err != nil {
			return resourceDiff(o, v1alpha1.DiffActionError, "", "the server's dry-run answer does not decode: "+err.Error())
		}
	case o.crdDefined || (o.namespaced && (p.createNamespace == o.namespace() || p.rendered[objKey{kind: "Namespace", name: o.namespace()}])):
		// Its CustomResourceDefinition or namespace comes with this sync:
		// the server cannot dry-run it yet; show what Git declares.
		target = o.obj.DeepCopy()
	default:
		return resourceDiff(o, v1alpha1.DiffActionError, "", "dry run refused as "+cl.who+": "+err.Error())
	}
	var liveObj *unstructured.Unstructured
	if live != nil {
		liveObj = live.obj
	}
	if live != nil && liveObj == nil {
		return resourceDiff(o, v1alpha1.DiffActionError, "", fmt.Sprintf("exists, but the list of %s could not be read whole", o.gvr.Resource))
	}
	a, b := diff.MaskSecrets(diff.Normalize(liveObj, appliedDigestAnnotation), diff.Normalize(target, appliedDigestAnnotation))
	text, err := diff.Unified(a, b, o.key.String())
	switch {
	case err != nil:
		return resourceDiff(o, v1alpha1.DiffActionError, "", "cannot print the diff: "+err.Error())
	case liveObj == nil:
		return resourceDiff(o, v1alpha1.DiffActionCreate, text, "")
	case text == "":
		return resourceDiff(o, v1alpha1.DiffActionUnchanged, "", "")
	}
	return resourceDiff(o, v1alpha1.DiffActionUpdate, text, "")
}

func resourceDiff(o *planObject, action, text, message string) v1alpha1.ResourceDiff {
	return v1alpha1.ResourceDiff{Group: o.gvk.Group, Version: o.gvk.Version, Kind: o.gvk.Kind, Namespace: o.namespace(), Name: o.name(),
		Action: action, Diff: text, Message: message}
}

// sortResourceStatuses orders status.resources as Argo CD lists them:
// group, kind, namespace, name.
func sortResourceStatuses(rs []v1alpha1.ResourceStatus) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		return keyLess(objKey{a.Group, a.Kind, a.Namespace, a.Name}, objKey{b.Group, b.Kind, b.Namespace, b.Name})
	})
}

// Comparer compares an Application's live state with what its source
// renders (the Engine implements it: Engine.Compare).
type Comparer interface {
	Compare(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, revisions []string) (*Comparison, error)
}

// Compare implements Comparer: drift detection. It runs what a sync runs
// before it applies (project checks, derivation and enforcement, render at
// revisions — one per source, as ResolveRevisions returns them; the render
// is cached per Application spec and revisions —, plan), then reads where
// the objects live as the derived ServiceAccount through the live-state
// cache (package livestate: one metadata informer per resource and
// namespace and identity, shared by every Application there; nothing is
// read per object and nothing is applied). A rendered object (hooks
// excluded) is Synced when it exists, carries this Application's tracking
// annotation, was last applied from exactly this render (its applied
// digest) and deputy's field manager still owns every field of it (package
// diff, Missing: anyone who changed or removed a field deputy set took it
// over); otherwise OutOfSync with a message saying which. Tracked objects
// no longer rendered are OutOfSync with RequiresPruning (Argo CD's
// semantics). It runs within sync.limits.operationTimeout.
//
// Errors: as Diff's, and a scope the identity may not list or watch
// (naming the resource, the namespace and the identity).
func (e *Engine) Compare(ctx context.Context, app *v1alpha1.Application, project *v1alpha1.AppProject, revisions []string) (out *Comparison, err error) {
	so := v1alpha1.SyncOperation{Prune: true}
	if app.Spec.HasMultipleSources() {
		so.Revisions = revisions
	} else if len(revisions) > 0 {
		so.Revision = revisions[0]
	}
	err = e.beforeWrites(ctx, Request{Application: app, Project: project, Sync: so},
		func(op *operation) { op.comparing = true },
		func(ctx context.Context, op *operation, cl *clients, p *plan) (err error) {
			out, err = op.compare(ctx, cl, p)
			return err
		})
	return out, err
}

// compare is Compare once the plan is made.
func (op *operation) compare(ctx context.Context, cl *clients, p *plan) (*Comparison, error) {
	targets := listTargets(p)
	op.e.watching.Set(op.tracking, op.server, cl.impersonated, gvrs(targets), op.e.opts.Now())
	seen, problems := op.observe(ctx, cl, targets, p.rendered)
	if len(problems) > 0 {
		return nil, fmt.Errorf("cannot compare the live state with Git as %s (%d problems): %s; grant list and watch on them to the ServiceAccount",
			cl.who, len(problems), listSome(problems))
	}
	out := &Comparison{Status: v1alpha1.SyncStatusCodeSynced}
	op.mu.Lock()
	if r := op.state.SyncResult; r != nil {
		out.Revisions = r.RevisionList()
	}
	op.mu.Unlock()
	for _, o := range p.objects {
		if o.hook {
			continue
		}
		st := v1alpha1.ResourceStatus{Group: o.gvk.Group, Version: o.gvk.Version, Kind: o.gvk.Kind, Namespace: o.namespace(), Name: o.name(),
			SyncWave: int64(o.wave), Status: v1alpha1.SyncStatusCodeSynced}
		if msg := op.drift(o, seen.live[o.key]); msg != "" {
			st.Status, st.Message = v1alpha1.SyncStatusCodeOutOfSync, msg
		}
		out.Resources = append(out.Resources, st)
	}
	for _, c := range seen.candidates {
		out.Resources = append(out.Resources, v1alpha1.ResourceStatus{Group: c.scope.gvk.Group, Version: c.scope.gvk.Version, Kind: c.scope.gvk.Kind,
			Namespace: c.namespace, Name: c.name, SyncWave: int64(c.wave), Status: v1alpha1.SyncStatusCodeOutOfSync, RequiresPruning: true,
			Message: "tracked by this Application but no longer rendered: a sync with prune deletes it"})
	}
	sortResourceStatuses(out.Resources)
	for _, r := range out.Resources {
		if r.Status != v1alpha1.SyncStatusCodeSynced {
			out.Status = v1alpha1.SyncStatusCodeOutOfSync
		}
	}
	return out, nil
}

// drift says why the live object differs from the planned one, or "".
func (op *operation) drift(o *planObject, live *liveObject) string {
	switch {
	case live == nil:
		return "missing: the object does not exist"
	case live.deleting:
		return "being deleted"
	case live.trackedByOther(op.tracking) != "":
		return "tracked by Application " + live.tracking + ", not this one"
	case live.tracking != op.tracking:
		return "exists without this Application's " + TrackingAnnotation + " annotation: a sync adopts it"
	case live.digest != o.digest:
		return "differs from Git: the last apply was of other content (changed in Git, or applied by another sync)"
	}
	missing, err := diff.Missing(live.owned, o.obj.Object, 3)
	switch {
	case err != nil:
		return "cannot read deputy's managed fields: " + err.Error()
	case len(missing) > 0:
		return fmt.Sprintf("changed in the cluster: deputy no longer owns %s (another field manager changed or removed it)", listSome(missing))
	}
	return ""
}

// clientCacheTTL is how long Compare reuses an identity's clients (and
// their discovery) before building them again.
const clientCacheTTL = 5 * time.Minute

// clientCache keeps Compare's clients per (server, identity): a comparison
// of every Application every period must not run discovery for each.
type clientCache struct {
	mu    sync.Mutex
	items map[string]cachedClients
}

type cachedClients struct {
	cl *clients
	at time.Time
}

// comparingClients returns the cached clients of id on op.server, building
// them when absent or older than clientCacheTTL.
func (op *operation) comparingClients(ctx context.Context, id identity) (*clients, error) {
	c := &op.e.comparers
	key := op.server + "\x00" + id.username
	c.mu.Lock()
	hit, ok := c.items[key]
	c.mu.Unlock()
	if ok && op.e.opts.Now().Sub(hit.at) < clientCacheTTL {
		return hit.cl, nil
	}
	cl, err := op.clientsFor(ctx, op.server, id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.items == nil {
		c.items = map[string]cachedClients{}
	}
	c.items[key] = cachedClients{cl: cl, at: op.e.opts.Now()}
	return cl, nil
}

// renderKey identifies a render for the render cache: the Application
// (with the capabilities it renders with) and its revisions; "" when the
// revisions are not fixed (nothing is cached).
func renderKey(app *v1alpha1.Application, so v1alpha1.SyncOperation) string {
	if so.Revision == "" && len(so.Revisions) == 0 {
		return ""
	}
	raw, err := json.Marshal(struct {
		Namespace, Name string
		Spec            v1alpha1.ApplicationSpec
		Revision        string
		Revisions       []string
	}{app.Namespace, app.Name, app.Spec, so.Revision, so.Revisions})
	if err != nil {
		return ""
	}
	return string(raw)
}

// liveClient is livestate's NewClient: a metadata client acting as the
// scope's identity on its server.
func (e *Engine) liveClient(ctx context.Context, s livestate.Scope) (metadata.Interface, error) {
	base, err := e.opts.Clusters.RESTConfig(ctx, s.Server)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(base)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "deputy (" + rest.DefaultKubernetesUserAgent() + ")"
	}
	if s.Identity != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: s.Identity}
	}
	return metadata.NewForConfig(cfg)
}

// liveChanged is livestate's OnChange: tracking is an Application's
// "NAMESPACE/NAME", as the changed object names it. Whoever may write an
// object can write any value there: only a change in a scope the
// Application's last comparison read (its kinds and namespaces, as its
// ServiceAccount) is the Application's; others are ignored, so that a
// tenant editing its own objects cannot make deputy compare another's
// Application.
func (e *Engine) liveChanged(tracking string, s livestate.Scope) {
	ns, name, ok := strings.Cut(tracking, "/")
	if ok && e.opts.OnLiveChange != nil && e.watching.Has(tracking, s) {
		e.opts.OnLiveChange(ns, name)
	}
}

// gvrs are the resources and namespaces of targets.
func gvrs(targets []listTarget) []livestate.Place {
	out := make([]livestate.Place, len(targets))
	for i, t := range targets {
		out[i] = livestate.Place{GVR: t.gvr, Namespace: t.namespace}
	}
	return out
}

// listLive is op.list for Compare: the scope from the live-state cache, as
// the identity.
func (op *operation) listLive(ctx context.Context, cl *clients, t listTarget) ([]metav1.PartialObjectMetadata, error) {
	items, err := op.e.live.List(ctx, livestate.Scope{Server: op.server, Identity: cl.impersonated, GVR: t.gvr, Namespace: t.namespace})
	if err != nil {
		return nil, err
	}
	out := make([]metav1.PartialObjectMetadata, len(items))
	for i, m := range items {
		out[i] = *m
	}
	return out, nil
}

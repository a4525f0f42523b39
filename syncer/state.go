package syncer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/syncer/source"
)

// operation is one run of the Engine: its request, its state and results.
type operation struct {
	e        *Engine
	req      Request
	app      *v1alpha1.Application
	project  *v1alpha1.AppProject
	progress Progress
	log      logr.Logger

	// Filled in as the operation proceeds.
	server, clusterName, destNamespace string
	options                            syncOptions
	tracking                           string
	// deleting: this is DeleteResources, not a sync; diffing: Diff;
	// comparing: Compare.
	deleting, diffing, comparing bool
	// local: the objects of a diff --local, used instead of the render.
	local []*unstructured.Unstructured

	mu    sync.Mutex // guards state, slots, extra and progress calls
	state *v1alpha1.OperationState
	// slots hold the results of planned work in plan order (nil until
	// known); extra holds prune results.
	slots []*v1alpha1.ResourceResult
	extra []*v1alpha1.ResourceResult
	done  bool
	// failure says why a step of the sync failed (run), "" while none did.
	failure string
	// hookUIDs are the objects named hooks created in this operation.
	hookUIDs map[objKey]string
}

func (e *Engine) newOperation(req Request, progress Progress) *operation {
	op := &operation{e: e, req: req, app: req.Application, project: req.Project, progress: progress, hookUIDs: map[objKey]string{}}
	op.log = e.opts.Logger
	if op.app != nil {
		op.log = op.log.WithValues("application", op.app.Namespace+"/"+op.app.Name)
		op.tracking = op.app.Namespace + "/" + op.app.Name
	}
	so := req.Sync
	op.state = &v1alpha1.OperationState{
		Operation: v1alpha1.Operation{Sync: &so, InitiatedBy: req.InitiatedBy},
		Phase:     v1alpha1.OperationRunning,
		StartedAt: metav1.NewTime(e.opts.Now()),
	}
	return op
}

// sync is the whole operation; every failure before apply ends it in Error.
func (op *operation) sync(ctx context.Context) {
	if err := op.validate(); err != nil {
		op.fail(err)
		return
	}
	op.mu.Lock()
	op.emit(nil)
	op.mu.Unlock()
	id, cl, p, err := op.prepare(ctx)
	if err != nil {
		op.fail(err)
		return
	}
	pf, err := op.preflight(ctx, cl, id, p)
	if err != nil {
		op.fail(err)
		return
	}
	op.run(ctx, cl, p, pf)
}

// prepare is what a sync, a diff and a comparison share before they touch
// an object: the project checks that need no cluster (before anything is
// fetched, on every source), the destination, the identity and its clients
// (before the render: a chart sees the destination's .Capabilities as that
// identity discovers them), the render and the plan.
func (op *operation) prepare(ctx context.Context) (identity, *clients, *plan, error) {
	compiled, err := op.compileProject()
	if err != nil {
		return identity{}, nil, nil, err
	}
	if err := checkSources(compiled, op.app); err != nil {
		return identity{}, nil, nil, err
	}
	if err := op.resolveDestination(ctx); err != nil {
		return identity{}, nil, nil, err
	}
	if err := checkDestination(compiled, op.project.Name, op.server, op.clusterName, op.destNamespace); err != nil {
		return identity{}, nil, nil, err
	}
	id, cl, err := op.impersonate(ctx, compiled)
	if err != nil {
		return id, nil, nil, err
	}
	objs, err := op.render(ctx, cl)
	if err != nil {
		return id, nil, nil, fmt.Errorf("failed to render the manifests: %w", err)
	}
	p, err := op.plan(ctx, cl, compiled, objs)
	return id, cl, p, err
}

// render renders the Application's sources at the operation's revisions
// as the identity's clients see the destination, and records the revisions.
func (op *operation) render(ctx context.Context, cl *clients) ([]*unstructured.Unstructured, error) {
	if op.local != nil {
		objs := make([]*unstructured.Unstructured, len(op.local))
		for i, o := range op.local {
			objs[i] = o.DeepCopy()
		}
		return objs, nil
	}
	app := cluster.AppWithCapabilities(op.app, cl.capabilities)
	key := ""
	if op.comparing {
		key = renderKey(app, op.req.Sync)
	}
	if objs, ok := op.e.renders.Get(key); ok {
		revs := op.req.Sync.Revisions
		if len(revs) == 0 {
			revs = []string{op.req.Sync.Revision}
		}
		op.setRevisions(revs)
		return objs, nil
	}
	r, err := source.RenderApplication(ctx, op.e.sources, app, op.req.Sync, source.WithProject(op.project.Name, op.project.Spec.SourceRepos))
	if r == nil {
		return nil, err
	}
	op.setRevisions(r.Revisions)
	if err == nil {
		op.e.renders.Put(key, r.Objects)
	}
	return r.Objects, err
}

func (op *operation) validate() error {
	switch {
	case op.app == nil:
		return errors.New("the request has no Application")
	case op.project == nil:
		return fmt.Errorf("application %s/%s: the request has no AppProject", op.app.Namespace, op.app.Name)
	case op.app.Spec.Project != "" && op.app.Spec.Project != op.project.Name:
		return fmt.Errorf("application %s/%s belongs to project %q, but the request carries AppProject %q", op.app.Namespace, op.app.Name, op.app.Spec.Project, op.project.Name)
	}
	_, err := op.healthTimeout()
	return err
}

// resolveDestination resolves a destination given by cluster name to its
// server URL (Argo CD's rule: name or server, not both).
func (op *operation) resolveDestination(ctx context.Context) error {
	d := op.app.Spec.Destination
	op.destNamespace = d.Namespace
	switch {
	case d.Server != "" && d.Name != "":
		return errors.New("application destination can't have both name and server defined: remove one of spec.destination.name and spec.destination.server")
	case d.Server == "" && d.Name == "":
		return errors.New("application destination has neither server nor name: set spec.destination.server or spec.destination.name")
	case d.Name != "":
		server, err := op.e.opts.Clusters.ServerForName(ctx, d.Name)
		if err != nil {
			return err
		}
		op.server, op.clusterName = server, d.Name
	default:
		op.server = d.Server
	}
	return nil
}

// compileProject compiles the operation's AppProject once, for every check
// of the operation.
func (op *operation) compileProject() (*policy.CompiledProject, error) {
	c, err := policy.CompileAppProject(op.project)
	if err != nil {
		return nil, fmt.Errorf("%w: fix the AppProject", err)
	}
	return c, nil
}

// emit (with mu held) calls the progress function with a copy of the state header (no
// resource list: the final state carries it) and of the resource.
func (op *operation) emit(res *v1alpha1.ResourceResult) {
	if op.progress == nil {
		return
	}
	st := op.headerLocked()
	var rc *v1alpha1.ResourceResult
	if res != nil {
		c := *res
		rc = &c
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				op.log.Error(fmt.Errorf("panic: %v", r), "progress function panicked; ignored")
			}
		}()
		op.progress(st, rc)
	}()
}

// headerLocked copies the state without results.
func (op *operation) headerLocked() *v1alpha1.OperationState {
	st := *op.state
	st.Operation.Sync = st.Operation.Sync.DeepCopy()
	if st.FinishedAt != nil {
		f := *st.FinishedAt
		st.FinishedAt = &f
	}
	if st.SyncResult != nil {
		st.SyncResult = &v1alpha1.SyncOperationResult{Revision: st.SyncResult.Revision, Revisions: slices.Clone(st.SyncResult.Revisions)}
	}
	return &st
}

// setRevisions records the rendered revisions: revision for spec.source,
// revisions (one per source) for spec.sources, as Argo CD records them.
func (op *operation) setRevisions(revs []string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.state.SyncResult == nil {
		op.state.SyncResult = &v1alpha1.SyncOperationResult{}
	}
	if op.app.Spec.HasMultipleSources() {
		op.state.SyncResult.Revisions = slices.Clone(revs)
	} else if len(revs) > 0 {
		op.state.SyncResult.Revision = revs[0]
	}
}

func (op *operation) setIdentity(who string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.state.Identity = who
}

// reserve allocates n result slots in plan order and returns the first.
func (op *operation) reserve(n int) int {
	op.mu.Lock()
	defer op.mu.Unlock()
	first := len(op.slots)
	op.slots = append(op.slots, make([]*v1alpha1.ResourceResult, n)...)
	return first
}

// record stores a planned result (slot >= 0) or a prune result (slot < 0)
// and reports it.
func (op *operation) record(slot int, res *v1alpha1.ResourceResult) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.done {
		return
	}
	if slot >= 0 {
		op.slots[slot] = res
	} else {
		op.extra = append(op.extra, res)
	}
	op.emit(res)
}

// fail ends the operation in Error (unless it already ended).
func (op *operation) fail(err error) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.done || op.state.Phase == v1alpha1.OperationError {
		return
	}
	op.state.Phase = v1alpha1.OperationError
	op.state.Message = err.Error()
}

// results returns the recorded results: planned ones in plan order, then
// prune results sorted by kind, namespace and name.
func (op *operation) resultsLocked() []*v1alpha1.ResourceResult {
	var out []*v1alpha1.ResourceResult
	for _, r := range op.slots {
		if r != nil {
			out = append(out, r)
		}
	}
	extra := append([]*v1alpha1.ResourceResult(nil), op.extra...)
	sort.SliceStable(extra, func(i, j int) bool { return resultLess(extra[i], extra[j]) })
	return append(out, extra...)
}

func resultLess(a, b *v1alpha1.ResourceResult) bool {
	if a.Group != b.Group {
		return a.Group < b.Group
	}
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// finish decides the final phase and message, reports it and returns the
// final state.
func (op *operation) finish() *v1alpha1.OperationState {
	op.mu.Lock()
	defer op.mu.Unlock()
	results := op.resultsLocked()
	if len(results) > 0 || op.state.SyncResult != nil {
		if op.state.SyncResult == nil {
			op.state.SyncResult = &v1alpha1.SyncOperationResult{}
		}
		op.state.SyncResult.Resources = results
	}
	if op.state.Phase != v1alpha1.OperationError {
		op.state.Phase, op.state.Message = summarize(results, op.state.Identity, op.req.Sync.DryRun, op.deleting)
		if op.failure != "" {
			op.state.Phase, op.state.Message = v1alpha1.OperationFailed, op.failure+" ("+op.state.Message+")"
		}
	}
	now := metav1.NewTime(op.e.opts.Now())
	op.state.FinishedAt = &now
	op.emit(nil)
	op.done = true
	kv := []any{"phase", op.state.Phase, "identity", op.state.Identity, "resources", len(results), "duration", now.Sub(op.state.StartedAt.Time)}
	if op.state.SyncResult != nil {
		kv = append(kv, "revision", strings.Join(op.state.SyncResult.RevisionList(), ","))
	}
	if op.state.Phase == v1alpha1.OperationSucceeded {
		op.log.Info("operation finished", kv...)
	} else {
		op.log.Info("operation finished", append(kv, "message", op.state.Message)...)
	}
	return op.state
}

// summarize turns results into the final phase and message.
func summarize(results []*v1alpha1.ResourceResult, who string, dryRun, deleting bool) (phase, message string) {
	var synced, pruned, failed, skipped, orphans int
	for _, r := range results {
		switch r.Status {
		case v1alpha1.ResultCodeSynced:
			synced++
		case v1alpha1.ResultCodePruned:
			pruned++
		case v1alpha1.ResultCodePruneSkipped:
			if strings.HasPrefix(r.Message, pruneOffPrefix) {
				orphans++ // prune was off
			} else {
				skipped++
			}
		case v1alpha1.ResultCodeSyncFailed:
			failed++
		}
	}
	as := "as " + who
	switch who {
	case ControllerIdentity:
		as = "as the controller identity (impersonation not enforced)"
	case ControllerIdentityImpersonationDisabled:
		as = "as the controller identity (impersonation disabled)"
	}
	prefix := ""
	if dryRun {
		prefix = "dry run: "
	}
	extra := ""
	if pruned > 0 {
		extra += fmt.Sprintf(", pruned %d", pruned)
	}
	if skipped > 0 {
		extra += fmt.Sprintf(", %d to prune skipped", skipped)
	}
	if orphans > 0 {
		extra += fmt.Sprintf(", %d would be pruned (prune is off)", orphans)
	}
	if deleting {
		if failed > 0 {
			return v1alpha1.OperationFailed, fmt.Sprintf("%d of %d resources could not be deleted, %s", failed, len(results), as)
		}
		return v1alpha1.OperationSucceeded, fmt.Sprintf("deleted %d resources, %s", pruned, as)
	}
	if failed > 0 {
		return v1alpha1.OperationFailed, fmt.Sprintf("%sone or more resources failed: %d of %d failed%s, %s", prefix, failed, len(results), extra, as)
	}
	return v1alpha1.OperationSucceeded, fmt.Sprintf("%ssuccessfully synced %d resources%s, %s", prefix, synced, extra, as)
}

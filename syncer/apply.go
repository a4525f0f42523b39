package syncer

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/health"
)

const (
	// crdEstablishTimeout bounds the wait for a CustomResourceDefinition of
	// the sync to become Established.
	crdEstablishTimeout = time.Minute
	// crdServeTimeout bounds the retries of a custom resource whose
	// definition was just established but is not served yet.
	crdServeTimeout = 30 * time.Second
	// pollInterval is the interval of both waits.
	pollInterval = 250 * time.Millisecond
)

// Server-side apply with conflicts forced (Argo CD does the same with
// ServerSideApply=true): what Git declares wins over another field manager
// that set the same fields (kubectl edit, a script); fields Git does not set
// stay with their managers, so for instance an autoscaler keeps replicas if
// Git leaves them out. Without force, one hand edit would make every later
// sync fail until someone resolves the conflict by hand.

// applyStep applies one step's objects: runs of equal kind rank one after
// the other, the objects of a run in parallel (Parallelism); after the
// CustomResourceDefinitions of the step, it waits until they are
// Established. A failed object fails alone: the others of the step are
// still applied.
func (op *operation) applyStep(ctx context.Context, cl *clients, p *plan, pf *preflightResult, st step) {
	for _, run := range runs(st.objects) {
		parallel(len(run), op.e.opts.Parallelism, func(i int) {
			if run[i].hook {
				op.runHook(ctx, cl, p, pf, run[i])
			} else {
				op.applyOne(ctx, cl, p, pf, run[i])
			}
		}, func(i int, r any) { op.panicked(run[i], r) })
		if run[0].group == groupCRDs && !op.req.Sync.DryRun {
			op.waitEstablished(ctx, cl, run)
		}
	}
}

func (op *operation) panicked(o *planObject, r any) {
	op.log.Error(fmt.Errorf("panic: %v", r), "sync engine panicked on one resource; it fails alone", "resource", o.key.String())
	op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, fmt.Sprintf("internal error in deputy's sync engine: %v", r)))
}

// createNamespace creates the destination namespace (CreateNamespace=true)
// as the operation's identity when the preflight found it missing. It
// carries no tracking annotation: prune never deletes it.
func (op *operation) createNamespace(ctx context.Context, cl *clients, p *plan, pf *preflightResult) {
	if !pf.createNamespace {
		return
	}
	res := &v1alpha1.ResourceResult{Version: "v1", Kind: "Namespace", Name: p.createNamespace}
	opts := metav1.CreateOptions{FieldManager: FieldManager}
	if op.req.Sync.DryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := cl.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.createNamespace}}, opts)
	switch {
	case err == nil && op.req.Sync.DryRun:
		res.Status, res.Message = v1alpha1.ResultCodeSynced, "created (dry run; syncOptions CreateNamespace=true)"
	case err == nil:
		res.Status, res.Message = v1alpha1.ResultCodeSynced, "created (syncOptions CreateNamespace=true)"
	case apierrors.IsAlreadyExists(err):
		res.Status, res.Message = v1alpha1.ResultCodeSynced, "exists (syncOptions CreateNamespace=true)"
	default:
		res.Status, res.Message = v1alpha1.ResultCodeSyncFailed, err.Error()
	}
	op.record(p.createSlot, res)
}

// applyOne server-side applies one object and records its result. An object
// another Application tracks (the preflight found it) fails untouched.
func (op *operation) applyOne(ctx context.Context, cl *clients, p *plan, pf *preflightResult, o *planObject) {
	dry := op.req.Sync.DryRun
	if other := pf.trackedBy[o.key]; other != "" {
		op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, trackedElsewhereMessage(o.key, other, op.tracking)))
		return
	}
	if err := ctx.Err(); err != nil {
		op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, "not applied: "+err.Error()))
		return
	}
	if o.unchanged {
		msg := "unchanged"
		if dry {
			msg += " (dry run)"
		}
		op.record(o.slot, o.result(v1alpha1.ResultCodeSynced, msg))
		return
	}
	body := o.body
	live, created, err := cl.apply(ctx, o.gvr, o.namespace(), o.name(), body, dry)
	if err != nil && o.crdDefined && !dry && apierrors.IsNotFound(err) {
		// Its definition was just established; the resource may take a
		// moment to be served.
		deadline := time.Now().Add(crdServeTimeout)
		for err != nil && apierrors.IsNotFound(err) && time.Now().Before(deadline) && sleep(ctx, pollInterval) {
			live, created, err = cl.apply(ctx, o.gvr, o.namespace(), o.name(), body, dry)
		}
	}
	if err == nil && !dry {
		o.keepLive(live)
	}
	if err != nil && dry && apierrors.IsNotFound(err) {
		switch {
		case o.crdDefined:
			op.record(o.slot, o.result(v1alpha1.ResultCodeSynced, "dry run skipped: its CustomResourceDefinition is applied by this sync"))
			return
		case o.namespaced && (p.createNamespace == o.namespace() || p.rendered[objKey{kind: "Namespace", name: o.namespace()}]):
			op.record(o.slot, o.result(v1alpha1.ResultCodeSynced, fmt.Sprintf("dry run skipped: namespace %s is created by this sync", o.namespace())))
			return
		}
	}
	if err != nil {
		op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, err.Error()))
		return
	}
	msg := "configured"
	if created {
		msg = "created"
	}
	if dry {
		msg += " (dry run)"
	}
	op.record(o.slot, o.result(v1alpha1.ResultCodeSynced, msg))
}

// trackedElsewhereMessage is the result of an object that Application other
// tracks ("NAMESPACE/NAME"), which Application self ("NAMESPACE/NAME") also
// renders: Argo CD's shared-resource conflict, an error here.
func trackedElsewhereMessage(key objKey, other, self string) string {
	return fmt.Sprintf("not applied: %s is tracked by Application %s (annotation %s), and an object belongs to one Application only: "+
		"remove it from one of the two repositories (the sources of Applications %s and %s); "+
		"if Application %s no longer renders it, delete the object or its %s annotation and this Application adopts it",
		key, other, TrackingAnnotation, other, self, other, TrackingAnnotation)
}

// waitEstablished waits, as the operation's identity, until every applied
// CustomResourceDefinition of the group is Established; one that is not in
// time fails.
func (op *operation) waitEstablished(ctx context.Context, cl *clients, crds []*planObject) {
	parallel(len(crds), op.e.opts.Parallelism, func(i int) {
		o := crds[i]
		if r := op.slotResult(o.slot); o.unchanged || r == nil || r.Status != v1alpha1.ResultCodeSynced {
			return
		}
		deadline := time.Now().Add(crdEstablishTimeout)
		last := "no Established condition yet"
		for {
			established, why, err := cl.established(ctx, o.name())
			if err == nil && established {
				return
			}
			if err != nil {
				last = err.Error()
			} else if why != "" {
				last = why
			}
			if !time.Now().Before(deadline) || !sleep(ctx, pollInterval) {
				break
			}
		}
		op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, fmt.Sprintf("applied, but not Established within %s: %s", crdEstablishTimeout, last)))
	}, func(i int, r any) { op.panicked(crds[i], r) })
}

// established reads a CustomResourceDefinition's Established condition.
func (cl *clients) established(ctx context.Context, name string) (bool, string, error) {
	raw, err := cl.raw.Get().AbsPath(resourcePath(gvrCRDs, "", name)).Do(ctx).Raw()
	if err != nil {
		return false, "", err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return false, "", err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Established" {
			continue
		}
		msg, _ := m["message"].(string)
		return m["status"] == "True", msg, nil
	}
	return false, "", nil
}

func (op *operation) slotResult(slot int) *v1alpha1.ResourceResult {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.slots[slot]
}

// sleep waits d unless ctx ends first; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// parallel runs f(0..n-1) with at most limit at once and waits for all. A
// panic in f(i) is recovered and handed to panicked(i, value).
func parallel(n, limit int, f func(i int), panicked func(i int, r any)) {
	if n == 0 {
		return
	}
	if limit <= 0 {
		limit = 1
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			defer func() {
				if r := recover(); r != nil {
					panicked(i, r)
				}
			}()
			f(i)
		}(i)
	}
	wg.Wait()
}

// keepLive keeps what the server returned for an object whose health (or
// hook phase) is read, so that waiting starts from it.
func (o *planObject) keepLive(raw []byte) {
	if !o.hook && health.Statusless(o.gvk.Group, o.gvk.Kind) {
		return
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return // waiting reads it instead
	}
	o.live, o.liveRV = u, u.GetResourceVersion()
}

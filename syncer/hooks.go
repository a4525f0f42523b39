package syncer

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/health"
	"deputy.dev/deputy/syncer/waves"
)

// Hooks (Argo CD's resource hooks, read by package waves) run in their
// phase and wave as the operation's identity, like every other object, and
// carry the tracking annotation; unlike other objects they are sent on
// every sync (never skipped as unchanged) and never pruned. A named hook
// whose object exists but is not tracked by this Application (another
// Application's, nobody's) fails untouched; one with the delete policy
// BeforeHookCreation (the default) has its previous object deleted first,
// and is then applied; a hook with
// metadata.generateName is created (POST) and the server names it. A hook
// is done when package health says its phase is Succeeded or Failed (a Job's
// Complete or Failed condition, a Pod's phase, any other kind's health).
// After the operation, hooks that succeeded are deleted when their policy
// says HookSucceeded, hooks that failed when it says HookFailed.

// runHook sends one hook and records its result (hook phase Running).
func (op *operation) runHook(ctx context.Context, cl *clients, p *plan, pf *preflightResult, o *planObject) {
	dry := op.req.Sync.DryRun
	if prev := op.carriedHook(o); prev != nil {
		r := o.result(v1alpha1.ResultCodeSynced, "succeeded in an earlier attempt of this operation; not run again")
		r.Name, r.HookPhase = prev.Name, v1alpha1.HookPhaseSucceeded
		o.createdName = prev.Name
		op.record(o.slot, r)
		return
	}
	if other := pf.trackedBy[o.key]; other != "" {
		op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, trackedElsewhereMessage(o.key, other, op.tracking)))
		return
	}
	if l := pf.live[o.key]; l != nil && !o.generated && l.tracking != op.tracking {
		// Every delete policy ends in deleting the hook's object
		// (BeforeHookCreation before it runs, HookSucceeded/HookFailed
		// after), and the hook's name is the tenant's: deputy deletes only
		// what carries this Application's tracking annotation (prune's
		// rule), so an existing object nobody tracks (someone else's, one a
		// controller owns) fails the hook untouched, like another
		// Application's above.
		op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, fmt.Sprintf("not run: %s exists and is not tracked by this Application (annotation %s): a hook's object is deleted and re-created, and deputy deletes only objects this Application tracks: rename the hook, or delete the object", o.key, TrackingAnnotation)))
		return
	}
	if err := ctx.Err(); err != nil {
		op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, "not run: "+err.Error()))
		return
	}
	if uid := op.previousHook(o, pf); uid != "" && !dry && !o.generated && o.place.HasPolicy(waves.BeforeHookCreation) {
		if err := op.deleteAndWait(ctx, cl, o, uid); err != nil {
			op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, fmt.Sprintf("cannot delete the hook's previous object (hook-delete-policy %s): %v", waves.BeforeHookCreation, err)))
			return
		}
	}
	var (
		raw []byte
		err error
		msg = "created"
	)
	if o.generated {
		opts := metav1.CreateOptions{FieldManager: FieldManager}
		if dry {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var created *unstructured.Unstructured
		if created, err = cl.dyn.Resource(o.gvr).Namespace(o.namespace()).Create(ctx, o.obj, opts); err == nil {
			o.createdName = created.GetName()
			raw, err = created.MarshalJSON()
		}
	} else {
		var created bool
		raw, created, err = cl.apply(ctx, o.gvr, o.namespace(), o.name(), o.body, dry)
		if !created {
			msg = "configured"
		}
	}
	if err != nil {
		op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, err.Error()))
		return
	}
	r := o.result(v1alpha1.ResultCodeSynced, msg)
	r.Name = o.name()
	if dry {
		r.Message += " (dry run)"
	} else {
		o.keepLive(raw)
		r.HookPhase = v1alpha1.HookPhaseRunning
		if o.live != nil && !o.generated {
			op.mu.Lock()
			op.hookUIDs[o.key] = string(o.live.GetUID())
			op.mu.Unlock()
		}
	}
	op.record(o.slot, r)
}

// previousHook is the UID of the object a named hook replaces: the one an
// earlier phase of this operation created (a hook of several phases runs
// anew in each), else the one the preflight found, "" when there is none.
func (op *operation) previousHook(o *planObject, pf *preflightResult) string {
	op.mu.Lock()
	defer op.mu.Unlock()
	if uid := op.hookUIDs[o.key]; uid != "" {
		return uid
	}
	if l := pf.live[o.key]; l != nil {
		return string(l.uid)
	}
	return ""
}

// deleteAndWait deletes o's live object (the one with uid) in the
// background and waits until it is gone.
func (op *operation) deleteAndWait(ctx context.Context, cl *clients, o *planObject, uid string) error {
	if err := cl.deleteObject(ctx, o, uid); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, crdEstablishTimeout)
	defer cancel()
	return health.Follow(ctx, cl.dyn.Resource(o.gvr).Namespace(o.namespace()), o.name(), "", func(u *unstructured.Unstructured) bool {
		return u == nil || string(u.GetUID()) != uid
	})
}

// deleteObject deletes o's live object in the background (kubectl delete's
// default), with a UID precondition when uid is known. An object already
// gone is no error.
func (cl *clients) deleteObject(ctx context.Context, o *planObject, uid string) error {
	propagation := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &propagation}
	if uid != "" {
		u := types.UID(uid)
		opts.Preconditions = &metav1.Preconditions{UID: &u}
	}
	err := cl.dyn.Resource(o.gvr).Namespace(o.namespace()).Delete(ctx, o.name(), opts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// carriedHook is o's result in the previous attempt of this operation when
// that attempt rendered the same revisions and the hook succeeded there:
// a retry does not run it again.
func (op *operation) carriedHook(o *planObject) *v1alpha1.ResourceResult {
	prev := op.req.Previous
	if prev == nil || prev.SyncResult == nil {
		return nil
	}
	op.mu.Lock()
	now := op.state.SyncResult
	op.mu.Unlock()
	if now == nil || !slices.Equal(now.RevisionList(), prev.SyncResult.RevisionList()) {
		return nil
	}
	for _, r := range prev.SyncResult.Resources {
		if r == nil || r.HookType != o.phase || r.HookPhase != v1alpha1.HookPhaseSucceeded ||
			r.Group != o.gvk.Group || r.Kind != o.gvk.Kind || r.Namespace != o.namespace() {
			continue
		}
		if r.Name == o.obj.GetName() || o.generated && strings.HasPrefix(r.Name, o.obj.GetGenerateName()) {
			return r
		}
	}
	return nil
}

// deleteHooks applies the delete policies once the operation's phases ran:
// HookSucceeded deletes a hook that succeeded, HookFailed one that failed.
// A hook carried over from an earlier attempt is left alone.
func (op *operation) deleteHooks(ctx context.Context, cl *clients, p *plan) {
	if op.req.Sync.DryRun {
		return
	}
	var todo []*planObject
	for _, o := range p.objects {
		r := op.slotResult(o.slot)
		if !o.hook || r == nil || r.Status != v1alpha1.ResultCodeSynced || o.live == nil {
			continue
		}
		ok := r.HookPhase == v1alpha1.HookPhaseSucceeded && o.place.HasPolicy(waves.HookSucceeded)
		bad := (r.HookPhase == v1alpha1.HookPhaseFailed || r.HookPhase == v1alpha1.HookPhaseError) && o.place.HasPolicy(waves.HookFailed)
		if ok || bad {
			todo = append(todo, o)
		}
	}
	parallel(len(todo), op.e.opts.Parallelism, func(i int) {
		o := todo[i]
		policy := waves.HookSucceeded
		if r := op.slotResult(o.slot); r.HookPhase != v1alpha1.HookPhaseSucceeded {
			policy = waves.HookFailed
		}
		err := cl.deleteObject(ctx, o, string(o.live.GetUID()))
		op.updateResult(o, func(r *v1alpha1.ResourceResult) {
			if err != nil {
				r.Message += fmt.Sprintf("; not deleted (hook-delete-policy %s): %v", policy, err)
			} else {
				r.Message += fmt.Sprintf("; deleted (hook-delete-policy %s)", policy)
			}
		})
	}, func(i int, r any) { op.panicked(todo[i], r) })
}

package syncer

import (
	"context"
	"fmt"

	"deputy.dev/deputy/policy/v1alpha1"
)

// run carries out a planned, preflighted sync in Argo CD's order: the
// namespace CreateNamespace=true creates, then phase PreSync, phase Sync and
// phase PostSync, each wave by wave; every step (one phase and wave) is
// applied and then waited for (waitStep) before the next one starts. Prune
// runs after the last wave of phase Sync, before PostSync (Argo CD's
// PruneLast), in the reverse wave order. The first step that fails stops the
// sync: later steps are not applied (their objects say why), prune only
// reports, and the SyncFail hooks run (and are waited for). Hooks' delete
// policies apply at the end. A dry run sends every step with dryRun=All and
// waits for nothing.
func (op *operation) run(ctx context.Context, cl *clients, p *plan, pf *preflightResult) {
	if p.createNamespace != "" {
		op.createNamespace(ctx, cl, p, pf)
	}
	var syncFail []step
	failure, pruned := "", false
	for _, st := range steps(p.objects) {
		switch {
		case st.phase == v1alpha1.SyncPhaseSyncFail:
			syncFail = append(syncFail, st)
			continue
		case failure != "":
			op.notRun(st, failure)
			continue
		case st.phase == v1alpha1.SyncPhasePostSync && !pruned:
			pruned = true
			op.prune(ctx, cl, p, pf)
		}
		failure = op.runStep(ctx, cl, p, pf, st)
	}
	if failure != "" {
		op.setFailure(failure)
	}
	if !pruned {
		op.prune(ctx, cl, p, pf)
	}
	if failure != "" && !op.req.Sync.DryRun {
		for _, st := range syncFail {
			if f := op.runStep(ctx, cl, p, pf, st); f != "" {
				op.setFailure(failure + "; SyncFail hooks: " + f)
				break
			}
		}
	}
	op.deleteHooks(ctx, cl, p)
}

// runStep applies one step and waits for it; it returns why it failed, or
// "".
func (op *operation) runStep(ctx context.Context, cl *clients, p *plan, pf *preflightResult, st step) string {
	op.applyStep(ctx, cl, p, pf, st)
	var failed []string
	for _, o := range st.objects {
		if r := op.slotResult(o.slot); r != nil && r.Status == v1alpha1.ResultCodeSyncFailed {
			failed = append(failed, o.key.String())
		}
	}
	if len(failed) > 0 {
		return fmt.Sprintf("phase %s, wave %d: %d resources failed to apply: %s", st.phase, st.wave, len(failed), listSome(failed))
	}
	if op.req.Sync.DryRun {
		return ""
	}
	return op.waitStep(ctx, cl, st, pf)
}

// notRun records the objects of a step after a failed one: not applied.
func (op *operation) notRun(st step, failure string) {
	for _, o := range st.objects {
		if o.hook {
			continue // a hook that did not run has no result
		}
		op.record(o.slot, o.result(v1alpha1.ResultCodeSyncFailed, fmt.Sprintf("not applied: an earlier step failed (%s)", failure)))
	}
}

// setFailure makes the operation end Failed with failure as the first part
// of its message (finish adds the counts).
func (op *operation) setFailure(failure string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.failure = failure
}

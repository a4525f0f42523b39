package syncer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/health"
)

// Waiting. After a step (one phase and wave) is applied, the operation
// waits until every object of it is healthy (a hook: until it completed)
// before the next step, within the health timeout. What an object looks like
// comes first from what the sync already has: the apply response, or the
// preflight's list for an object that was not sent again; kinds without a
// status (health.Statusless) are Healthy once applied, without any read.
// Only an object that is not done yet is watched, by name (fieldSelector
// metadata.name, authorized as "watch" on that name), as the operation's
// identity, from the resourceVersion it was seen at: the next step starts
// one watch event after the last object became healthy, never a poll
// interval later.

// healthTimeout is the operation's wait per step: the operation's
// healthTimeout, else the Application's, else the engine's.
func (op *operation) healthTimeout() (time.Duration, error) {
	for _, f := range []struct {
		value string
		path  *field.Path
	}{
		{op.req.Sync.HealthTimeout, field.NewPath("operation", "sync", "healthTimeout")},
		{syncPolicyHealthTimeout(op.app), field.NewPath("spec", "syncPolicy", "healthTimeout")},
	} {
		d, ferr := v1alpha1.ParseHealthTimeout(f.value, f.path)
		if ferr != nil {
			return 0, fmt.Errorf("application %s/%s: %s", op.app.Namespace, op.app.Name, ferr.Error())
		}
		if d > 0 {
			return d, nil
		}
	}
	return op.e.opts.HealthTimeout, nil
}

func syncPolicyHealthTimeout(app *v1alpha1.Application) string {
	if app.Spec.SyncPolicy == nil {
		return ""
	}
	return app.Spec.SyncPolicy.HealthTimeout
}

// observeLive records what live (nil: it does not exist) says about o: its
// health, and for a hook its phase; it reports whether o is done (Healthy,
// Suspended or Degraded; a hook Succeeded or Failed).
func (op *operation) observeLive(o *planObject, live *unstructured.Unstructured) bool {
	if o.hook {
		phase, msg := health.HookPhase(live)
		if live == nil {
			phase, msg = v1alpha1.HookPhaseFailed, "the hook was deleted before it completed"
		}
		op.updateResult(o, func(r *v1alpha1.ResourceResult) {
			r.HookPhase = phase
			if msg != "" {
				r.Message = msg
			}
		})
		return phase != v1alpha1.HookPhaseRunning
	}
	h := health.Assess(live)
	return op.setHealth(o, h)
}

// setHealth records o's health and reports whether o is done.
func (op *operation) setHealth(o *planObject, h v1alpha1.HealthStatus) bool {
	op.updateResult(o, func(r *v1alpha1.ResourceResult) { r.Health = &h })
	switch h.Status {
	case v1alpha1.HealthStatusHealthy, v1alpha1.HealthStatusSuspended, v1alpha1.HealthStatusDegraded:
		return true
	}
	return false
}

// updateResult changes o's recorded result (a copy: the previous one may
// have been handed to Progress) and reports it when it changed.
func (op *operation) updateResult(o *planObject, change func(*v1alpha1.ResourceResult)) {
	op.mu.Lock()
	defer op.mu.Unlock()
	old := op.slots[o.slot]
	if old == nil || op.done {
		return
	}
	r := old.DeepCopy()
	change(r)
	if same(old, r) {
		return
	}
	op.slots[o.slot] = r
	op.emit(r)
}

func same(a, b *v1alpha1.ResourceResult) bool {
	ha, hb := a.Health, b.Health
	if (ha == nil) != (hb == nil) || (ha != nil && (ha.Status != hb.Status || ha.Message != hb.Message)) {
		return false
	}
	return a.HookPhase == b.HookPhase && a.Message == b.Message && a.Status == b.Status
}

// waitStep waits for the step's applied objects (see Waiting) and returns
// why the step failed, or "".
func (op *operation) waitStep(ctx context.Context, cl *clients, st step, pf *preflightResult) string {
	timeout, err := op.healthTimeout()
	if err != nil {
		return err.Error()
	}
	var waiting []*planObject
	for _, o := range st.objects {
		if r := op.slotResult(o.slot); r == nil || r.Status != v1alpha1.ResultCodeSynced || r.HookPhase == v1alpha1.HookPhaseSucceeded && o.live == nil {
			continue
		}
		if !op.initialHealth(o, pf) {
			waiting = append(waiting, o)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		mu       sync.Mutex
		problems []string
	)
	parallel(len(waiting), maxWatches, func(i int) {
		o := waiting[i]
		rv := o.liveRV
		if err := health.Follow(wctx, cl.dyn.Resource(o.gvr).Namespace(o.namespace()), o.name(), rv, func(u *unstructured.Unstructured) bool { return op.observeLive(o, u) }); err != nil && wctx.Err() == nil {
			mu.Lock()
			problems = append(problems, fmt.Sprintf("%s: cannot watch it as %s: %v", o.key, cl.who, err))
			mu.Unlock()
		}
	}, func(i int, r any) { op.panicked(waiting[i], r) })
	return op.stepOutcome(st, timeout, wctx.Err() != nil && ctx.Err() == nil, problems)
}

// maxWatches bounds the watches of one step open at once.
const maxWatches = 64

// initialHealth records what the sync already knows of o and reports
// whether o is done without a read.
func (op *operation) initialHealth(o *planObject, pf *preflightResult) bool {
	switch {
	case o.live != nil:
		return op.observeLive(o, o.live)
	case !o.hook && health.Statusless(o.gvk.Group, o.gvk.Kind):
		return op.setHealth(o, v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusHealthy})
	case !o.hook && pf.live[o.key] != nil && pf.live[o.key].health != nil:
		l := pf.live[o.key]
		o.liveRV = l.listRV
		return op.setHealth(o, *l.health)
	}
	return false
}

// stepOutcome names what kept a step from succeeding: failed hooks,
// Degraded objects, objects that were not done within timeout.
func (op *operation) stepOutcome(st step, timeout time.Duration, timedOut bool, problems []string) string {
	var failedHooks, degraded, unfinished []string
	for _, o := range st.objects {
		r := op.slotResult(o.slot)
		if r == nil || r.Status != v1alpha1.ResultCodeSynced {
			continue
		}
		what := describeResult(o, r)
		switch {
		case o.hook && (r.HookPhase == v1alpha1.HookPhaseFailed || r.HookPhase == v1alpha1.HookPhaseError):
			failedHooks = append(failedHooks, what)
		case o.hook && r.HookPhase != v1alpha1.HookPhaseSucceeded:
			unfinished = append(unfinished, what)
		case !o.hook && r.Health != nil && r.Health.Status == v1alpha1.HealthStatusDegraded:
			degraded = append(degraded, what)
		case !o.hook && (r.Health == nil || !doneHealth(r.Health.Status)):
			unfinished = append(unfinished, what)
		}
	}
	where := fmt.Sprintf("phase %s, wave %d", st.phase, st.wave)
	var out []string
	if len(failedHooks) > 0 {
		out = append(out, fmt.Sprintf("%s: hook failed: %s", where, listSome(failedHooks)))
	}
	if len(degraded) > 0 {
		out = append(out, fmt.Sprintf("%s: Degraded: %s", where, listSome(degraded)))
	}
	if len(unfinished) > 0 {
		if timedOut {
			out = append(out, fmt.Sprintf("%s: not healthy within %s (healthTimeout): %s", where, timeout, listSome(unfinished)))
		} else {
			out = append(out, fmt.Sprintf("%s: stopped while waiting for %s", where, listSome(unfinished)))
		}
	}
	out = append(out, problems...)
	return strings.Join(out, "; ")
}

func doneHealth(status string) bool {
	return status == v1alpha1.HealthStatusHealthy || status == v1alpha1.HealthStatusSuspended
}

// describeResult is "Kind NAMESPACE/NAME (Health: message)".
func describeResult(o *planObject, r *v1alpha1.ResourceResult) string {
	key := o.key
	key.name = r.Name
	s := key.String()
	switch {
	case o.hook:
		s += " (" + o.phase + " hook " + r.HookPhase
	case r.Health != nil:
		s += " (" + r.Health.Status
	default:
		return s + " (health not known yet)"
	}
	msg := r.Message
	if r.Health != nil && !o.hook {
		msg = r.Health.Message
	}
	if msg != "" {
		s += ": " + msg
	}
	return s + ")"
}

// listSome joins up to 10 items and says how many more there are.
func listSome(items []string) string {
	if len(items) > 10 {
		return strings.Join(items[:10], ", ") + fmt.Sprintf(" and %d more", len(items)-10)
	}
	return strings.Join(items, ", ")
}

package appstatus

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/syncer/health"
)

// MaxStatusResources bounds status.resources: the status is stored in etcd
// (1.5 MiB an object by default) next to status.operationState, so an
// Application of more resources lists its first MaxStatusResources (in the
// operation's order) there; status.health still counts every one.
const MaxStatusResources = 5000

// maxHealthMessageResources is how many of the worst resources
// status.health.message names.
const maxHealthMessageResources = 3

// RecordOutcome sets status.health and status.resources from state, the
// end of an attempt (a final state, or a failed one waiting for its retry),
// in both modes:
//   - status.resources: one entry per result of a non-hook resource that
//     was not pruned (PruneSkipped ones included: they are still there), its
//     sync status Synced, or OutOfSync for SyncFailed and PruneSkipped, its
//     health and wave; at most MaxStatusResources;
//   - status.health: the worst health of those results that carry one
//     (health.Aggregate, Argo CD's order), its message naming the resources
//     of that health, lastTransitionTime now when the status changes; Unknown
//     when none carries a health (the attempt failed before it waited for
//     health).
//
// A dry run, and an attempt without a result of a non-hook resource (it
// failed before it applied anything: render, permissions), leave both as
// they were: they tell nothing about the live objects. Before the first
// operation that applied something, status.health is absent.
func RecordOutcome(status *v1alpha1.ApplicationStatus, state *v1alpha1.OperationState, now metav1.Time) {
	if state == nil || state.SyncResult == nil || (state.Operation.Sync != nil && state.Operation.Sync.DryRun) {
		return
	}
	var resources []v1alpha1.ResourceStatus
	var assessed []*v1alpha1.ResourceResult
	found := false
	for _, r := range state.SyncResult.Resources {
		if r == nil || r.HookType != "" || r.Status == v1alpha1.ResultCodePruned {
			continue
		}
		found = true
		if r.Health != nil && r.Health.Status != "" {
			assessed = append(assessed, r)
		}
		if len(resources) < MaxStatusResources {
			resources = append(resources, resourceStatus(r))
		}
	}
	if !found {
		return
	}
	status.Resources = resources
	h := aggregateHealth(assessed)
	if prev := status.Health; prev.Status == h.Status && prev.LastTransitionTime != nil {
		h.LastTransitionTime = prev.LastTransitionTime.DeepCopy()
	} else {
		h.LastTransitionTime = &now
	}
	status.Health = h
}

// aggregateHealth is the Application's health from its assessed results.
func aggregateHealth(assessed []*v1alpha1.ResourceResult) v1alpha1.HealthStatus {
	if len(assessed) == 0 {
		return v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusUnknown,
			Message: "the last operation assessed no resource's health: it ended before it waited for health"}
	}
	codes := make([]string, len(assessed))
	for i, r := range assessed {
		codes[i] = r.Health.Status
	}
	worst := health.Aggregate(codes...)
	if worst == v1alpha1.HealthStatusHealthy {
		return v1alpha1.HealthStatus{Status: worst}
	}
	var names []string
	n := 0
	for _, r := range assessed {
		if r.Health.Status != worst {
			continue
		}
		if n++; n <= maxHealthMessageResources {
			names = append(names, ResourceName(r)+healthDetail(r.Health.Message))
		}
	}
	msg := strings.Join(names, "; ")
	if n > maxHealthMessageResources {
		msg += fmt.Sprintf(" (and %d more)", n-maxHealthMessageResources)
	}
	return v1alpha1.HealthStatus{Status: worst, Message: msg}
}

func healthDetail(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// resourceName is "Deployment ns/web" (a cluster-scoped object: "Namespace
// web").
// ResourceName names r in messages: "KIND NAMESPACE/NAME" (or "KIND NAME").
func ResourceName(r *v1alpha1.ResourceResult) string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// resourceStatus is r's status.resources entry.
func resourceStatus(r *v1alpha1.ResourceResult) v1alpha1.ResourceStatus {
	s := v1alpha1.ResourceStatus{Group: r.Group, Version: r.Version, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name,
		Status: v1alpha1.SyncStatusCodeSynced, SyncWave: r.SyncWave}
	if r.Status == v1alpha1.ResultCodeSyncFailed || r.Status == v1alpha1.ResultCodePruneSkipped {
		s.Status = v1alpha1.SyncStatusCodeOutOfSync
	}
	if r.Health != nil {
		s.Health = &v1alpha1.HealthStatus{Status: r.Health.Status, Message: r.Health.Message}
	}
	return s
}

// AttemptEnded reports whether state is the end of an attempt: a final
// state, or a failed attempt's waiting for its retry.
func AttemptEnded(state *v1alpha1.OperationState) bool {
	return state != nil && (state.Phase != v1alpha1.OperationRunning || state.NextRetryAt != nil)
}

// ApplyComparison sets the part of status a comparison with Git decides
// (drift detection): reconciledAt now; on an error (or no comparison),
// status.sync.status Unknown and a ComparisonError condition naming it;
// else status.sync (status and the revisions compared with: revision for
// spec.source, revisions for spec.sources), status.resources as cmp lists
// them (at most MaxStatusResources) with the health the last operation
// recorded for each, and no ComparisonError condition.
func ApplyComparison(status *v1alpha1.ApplicationStatus, app *v1alpha1.Application, cmp *syncer.Comparison, cmpErr error, now metav1.Time) {
	status.ReconciledAt = &now
	if cmpErr != nil || cmp == nil {
		msg := "the live state was not compared with Git"
		if cmpErr != nil {
			msg = cmpErr.Error()
		}
		status.Sync.Status = v1alpha1.SyncStatusCodeUnknown
		SetCondition(status, v1alpha1.ApplicationConditionComparisonError, msg)
		return
	}
	SetCondition(status, v1alpha1.ApplicationConditionComparisonError, "")
	status.Sync = v1alpha1.SyncStatus{Status: cmp.Status}
	if app.Spec.HasMultipleSources() {
		status.Sync.Revisions = slices.Clone(cmp.Revisions)
	} else if len(cmp.Revisions) > 0 {
		status.Sync.Revision = cmp.Revisions[0]
	}
	health := map[string]*v1alpha1.HealthStatus{}
	for _, r := range status.Resources {
		health[resourceStatusKey(r)] = r.Health
	}
	resources := make([]v1alpha1.ResourceStatus, 0, min(len(cmp.Resources), MaxStatusResources))
	for _, r := range cmp.Resources {
		if len(resources) == MaxStatusResources {
			break
		}
		r.Health = health[resourceStatusKey(r)]
		resources = append(resources, r)
	}
	status.Resources = resources
}

func resourceStatusKey(r v1alpha1.ResourceStatus) string {
	return strings.Join([]string{r.Group, r.Kind, r.Namespace, r.Name}, "/")
}

// SetCondition sets the condition of type typ to message ("" removes it)
// and reports whether status changed. LastTransitionTime is when the
// condition appeared; a new message keeps it.
func SetCondition(status *v1alpha1.ApplicationStatus, typ, message string) bool {
	for i, cond := range status.Conditions {
		if cond.Type != typ {
			continue
		}
		if message == "" {
			status.Conditions = append(status.Conditions[:i], status.Conditions[i+1:]...)
			return true
		}
		if cond.Message == message {
			return false
		}
		status.Conditions[i].Message = message
		return true
	}
	if message == "" {
		return false
	}
	now := metav1.Now()
	status.Conditions = append(status.Conditions, v1alpha1.ApplicationCondition{Type: typ, Message: message, LastTransitionTime: &now})
	return true
}

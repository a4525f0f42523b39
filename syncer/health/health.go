package health

import (
	"fmt"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
)

// order ranks health codes from best to worst, as Argo CD ranks them when it
// aggregates an Application's health (gitops-engine pkg/health healthOrder).
var order = map[string]int{
	v1alpha1.HealthStatusHealthy:     0,
	v1alpha1.HealthStatusSuspended:   1,
	v1alpha1.HealthStatusProgressing: 2,
	v1alpha1.HealthStatusMissing:     3,
	v1alpha1.HealthStatusDegraded:    4,
	v1alpha1.HealthStatusUnknown:     5,
}

// Worse reports whether health code a is worse than b in Argo CD's order
// (Healthy < Suspended < Progressing < Missing < Degraded < Unknown). An
// unrecognised code ranks as Unknown.
func Worse(a, b string) bool { return rank(a) > rank(b) }

func rank(code string) int {
	if r, ok := order[code]; ok {
		return r
	}
	return order[v1alpha1.HealthStatusUnknown]
}

// Aggregate returns the worst of codes (Argo CD's Application health), or
// Healthy for none.
func Aggregate(codes ...string) string {
	worst := v1alpha1.HealthStatusHealthy
	for _, c := range codes {
		if Worse(c, worst) {
			worst = c
		}
	}
	return worst
}

// Assess returns the health of live, an object as read from the cluster
// (nil: Missing). kstatus decides (its conventions for kinds it does not
// know: status.conditions Ready, Reconciling and Stalled, and
// status.observedGeneration against metadata.generation), mapped to Argo
// CD's codes: Current → Healthy, InProgress and Terminating → Progressing,
// Failed → Degraded, NotFound → Missing, Unknown or an error → Unknown.
// Argo CD's Suspended comes first: a Deployment with spec.paused, a CronJob
// or Job with spec.suspend.
func Assess(live *unstructured.Unstructured) v1alpha1.HealthStatus {
	if live == nil {
		return v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusMissing, Message: "the object does not exist"}
	}
	if msg, ok := suspended(live); ok {
		return v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusSuspended, Message: msg}
	}
	res, err := status.Compute(live)
	if err != nil {
		return v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusUnknown, Message: fmt.Sprintf("cannot assess its status: %v", err)}
	}
	switch res.Status {
	case status.CurrentStatus:
		return v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusHealthy, Message: res.Message}
	case status.InProgressStatus, status.TerminatingStatus:
		return v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusProgressing, Message: res.Message}
	case status.FailedStatus:
		return v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusDegraded, Message: res.Message}
	case status.NotFoundStatus:
		return v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusMissing, Message: res.Message}
	}
	return v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusUnknown, Message: res.Message}
}

// suspended is Argo CD's Suspended: a paused Deployment, a suspended CronJob
// or Job (gitops-engine pkg/health and Argo CD's batch resource checks).
func suspended(u *unstructured.Unstructured) (string, bool) {
	gvk := u.GroupVersionKind()
	switch {
	case gvk.Group == "apps" && gvk.Kind == "Deployment":
		if p, _, _ := unstructured.NestedBool(u.Object, "spec", "paused"); p {
			return "the Deployment is paused (spec.paused)", true
		}
	case gvk.Group == "batch" && (gvk.Kind == "CronJob" || gvk.Kind == "Job"):
		if s, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); s {
			return "the " + gvk.Kind + " is suspended (spec.suspend)", true
		}
	}
	return "", false
}

// HookPhase returns the progress of a hook resource (Argo CD's hook
// phases): a Job is Succeeded when its Complete condition is True and
// Failed when its Failed condition is; a Pod is Succeeded or Failed by
// status.phase; any other kind is Succeeded once Assess says Healthy or
// Suspended, Failed when Degraded. Everything else is Running. live nil is
// Running (not created yet).
func HookPhase(live *unstructured.Unstructured) (phase, message string) {
	if live == nil {
		return v1alpha1.HookPhaseRunning, "not created yet"
	}
	gvk := live.GroupVersionKind()
	switch {
	case gvk.Group == "batch" && gvk.Kind == "Job":
		conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m == nil || m["status"] != "True" {
				continue
			}
			msg, _ := m["message"].(string)
			switch m["type"] {
			case "Complete":
				return v1alpha1.HookPhaseSucceeded, msg
			case "Failed":
				return v1alpha1.HookPhaseFailed, msg
			}
		}
		return v1alpha1.HookPhaseRunning, "the Job has not completed"
	case gvk.Group == "" && gvk.Kind == "Pod":
		phase, _, _ := unstructured.NestedString(live.Object, "status", "phase")
		msg, _, _ := unstructured.NestedString(live.Object, "status", "message")
		switch phase {
		case "Succeeded":
			return v1alpha1.HookPhaseSucceeded, msg
		case "Failed":
			return v1alpha1.HookPhaseFailed, msg
		}
		return v1alpha1.HookPhaseRunning, fmt.Sprintf("the Pod is %s", phase)
	}
	h := Assess(live)
	switch h.Status {
	case v1alpha1.HealthStatusHealthy, v1alpha1.HealthStatusSuspended:
		return v1alpha1.HookPhaseSucceeded, h.Message
	case v1alpha1.HealthStatusDegraded:
		return v1alpha1.HookPhaseFailed, h.Message
	}
	return v1alpha1.HookPhaseRunning, h.Message
}

// statusless are kinds whose objects carry no status that Assess reads:
// they are Healthy as soon as they exist, so an engine need not read them
// back (kstatus returns Current for every one of them).
var statusless = map[[2]string]bool{
	{"", "ConfigMap"}: true, {"", "Secret"}: true, {"", "ServiceAccount"}: true,
	{"", "LimitRange"}: true, {"", "Endpoints"}: true,
	{"rbac.authorization.k8s.io", "Role"}: true, {"rbac.authorization.k8s.io", "RoleBinding"}: true,
	{"rbac.authorization.k8s.io", "ClusterRole"}: true, {"rbac.authorization.k8s.io", "ClusterRoleBinding"}: true,
	{"networking.k8s.io", "NetworkPolicy"}: true, {"networking.k8s.io", "IngressClass"}: true,
	{"scheduling.k8s.io", "PriorityClass"}: true, {"storage.k8s.io", "StorageClass"}: true,
	{"admissionregistration.k8s.io", "ValidatingWebhookConfiguration"}: true,
	{"admissionregistration.k8s.io", "MutatingWebhookConfiguration"}:   true,
}

// Statusless reports whether objects of group/kind carry no status that
// Assess reads (ConfigMaps, Secrets, RBAC objects, …): Healthy once they
// exist.
func Statusless(group, kind string) bool { return statusless[[2]string{group, kind}] }

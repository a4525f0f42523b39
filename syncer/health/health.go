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
// unrecognised code, the empty one included, ranks as Unknown: Argo CD
// ranks it as Healthy, which would let a code deputy cannot read hide a
// problem.
func Worse(a, b string) bool { return rank(a) > rank(b) }

func rank(code string) int {
	if r, ok := order[code]; ok {
		return r
	}
	return order[v1alpha1.HealthStatusUnknown]
}

// Aggregate returns the worst of codes (Argo CD's Application health), or
// Healthy for none. An unrecognised code counts, and is returned, as
// Unknown. Which resources take part (Argo CD leaves out hooks and missing
// resources) is the caller's choice.
func Aggregate(codes ...string) string {
	worst := v1alpha1.HealthStatusHealthy
	for _, c := range codes {
		if Worse(c, worst) {
			worst = c
		}
	}
	if _, ok := order[worst]; !ok {
		return v1alpha1.HealthStatusUnknown
	}
	return worst
}

// Assess returns the health of live, an object as read from the cluster
// (nil: Missing). An object being deleted is Progressing. For the kinds
// whose health Argo CD judges differently from kstatus, deputy mostly
// follows Argo CD (rules, in kinds.go and pod.go: a paused Deployment is
// Suspended, a Job is Progressing until it completes, a Pod is judged by
// its restart policy, a LoadBalancer Service or an Ingress is Progressing
// until it has an address, ...). Everything else kstatus decides (its conventions for kinds it does not
// know: status.conditions Ready, Reconciling and Stalled, and
// status.observedGeneration against metadata.generation), mapped to Argo
// CD's codes: Current → Healthy, InProgress and Terminating → Progressing,
// Failed → Degraded, NotFound → Missing, Unknown or an error → Unknown.
func Assess(live *unstructured.Unstructured) v1alpha1.HealthStatus {
	if live == nil {
		return hs(v1alpha1.HealthStatusMissing, "the object does not exist")
	}
	if live.GetDeletionTimestamp() != nil {
		return hs(v1alpha1.HealthStatusProgressing, "pending deletion")
	}
	if r, ok := rules[live.GroupVersionKind().GroupKind()]; ok {
		if h, ok := r(live); ok {
			return h
		}
	}
	return kstatus(live)
}

// kstatus is kstatus' verdict in Argo CD's codes.
func kstatus(live *unstructured.Unstructured) v1alpha1.HealthStatus {
	res, err := status.Compute(live)
	if err != nil {
		return hs(v1alpha1.HealthStatusUnknown, fmt.Sprintf("cannot assess its status: %v", err))
	}
	switch res.Status {
	case status.CurrentStatus:
		return hs(v1alpha1.HealthStatusHealthy, res.Message)
	case status.InProgressStatus, status.TerminatingStatus:
		return hs(v1alpha1.HealthStatusProgressing, res.Message)
	case status.FailedStatus:
		return hs(v1alpha1.HealthStatusDegraded, res.Message)
	case status.NotFoundStatus:
		return hs(v1alpha1.HealthStatusMissing, res.Message)
	}
	return hs(v1alpha1.HealthStatusUnknown, res.Message)
}

// HookPhase returns the progress of a hook resource (Argo CD's hook
// phases: Running, Succeeded, Failed). A Job has Succeeded when its
// Complete condition is True and Failed when its Failed condition is; a
// suspended Job is still Running (it has not run). A Pod is judged as
// Assess judges a hook Pod: one with restartPolicy OnFailure or Never by
// status.phase (Succeeded, Failed, else Running), one with restartPolicy
// Always has Succeeded once Ready and Failed when its containers keep
// failing to start. Any other kind has Succeeded once Assess says Healthy
// or Suspended, Failed when Degraded, and is Running otherwise. live nil
// is Running (not created yet).
//
// Two choices differ from Argo CD, which derives a hook's phase from its
// health: Suspended counts as Succeeded, as the engine counts it done for
// any other resource (Argo CD keeps a Suspended hook Running, which no
// health timeout ends there); Unknown stays Running until the health
// timeout names it (Argo CD fails the hook at once).
func HookPhase(live *unstructured.Unstructured) (phase, message string) {
	if live == nil {
		return v1alpha1.HookPhaseRunning, "not created yet"
	}
	var h v1alpha1.HealthStatus
	switch gk := live.GroupVersionKind().GroupKind(); {
	case gk.Group == "batch" && gk.Kind == "Job":
		h = jobHealth(live)
		if h.Status == v1alpha1.HealthStatusSuspended {
			return v1alpha1.HookPhaseRunning, h.Message
		}
	case gk.Group == "" && gk.Kind == "Pod":
		h = podHealth(live, true)
	default:
		h = Assess(live)
	}
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

// MayWait reports whether an object like rendered (the manifest, before it
// is applied) can be anything but Healthy once it exists, so that a sync
// must be able to read and watch it: false for kinds without a status
// (Statusless) and for a Service that is not of type LoadBalancer (Healthy
// as soon as it exists), true for everything else.
func MayWait(rendered *unstructured.Unstructured) bool {
	gvk := rendered.GroupVersionKind()
	if Statusless(gvk.Group, gvk.Kind) {
		return false
	}
	if gvk.Group == "" && gvk.Kind == "Service" {
		t, _, _ := unstructured.NestedString(rendered.Object, "spec", "type")
		return t == "LoadBalancer"
	}
	return true
}

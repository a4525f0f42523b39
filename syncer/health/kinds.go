package health

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"deputy.dev/deputy/policy/v1alpha1"
)

// rule is deputy's own assessment of one kind, where deputy does not take
// kstatus' answer as it is: mostly where Argo CD (gitops-engine
// pkg/health) judges the kind otherwise and deputy follows Argo CD. ok
// false hands the object to kstatus. testdata/*.yaml records, case by
// case, what kstatus and Argo CD answer and why deputy answers as it does.
type rule func(u *unstructured.Unstructured) (h v1alpha1.HealthStatus, ok bool)

// rules are the kinds deputy does not leave to kstatus alone.
var rules = map[schema.GroupKind]rule{
	{Group: "apps", Kind: "Deployment"}:                     deploymentRule,
	{Group: "apps", Kind: "DaemonSet"}:                      daemonSetRule,
	{Group: "apps", Kind: "ReplicaSet"}:                     replicaSetRule,
	{Group: "batch", Kind: "Job"}:                           jobRule,
	{Group: "batch", Kind: "CronJob"}:                       cronJobRule,
	{Kind: "Pod"}:                                           podRule,
	{Kind: "PersistentVolumeClaim"}:                         pvcRule,
	{Kind: "Service"}:                                       serviceRule,
	{Group: "networking.k8s.io", Kind: "Ingress"}:           ingressRule,
	{Group: "extensions", Kind: "Ingress"}:                  ingressRule,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:   apiServiceRule,
	{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}: hpaRule,
	{Group: "argoproj.io", Kind: "Workflow"}:                workflowRule,
}

func hs(code, message string) v1alpha1.HealthStatus {
	return v1alpha1.HealthStatus{Status: code, Message: message}
}

// condition is one entry of status.conditions, read leniently.
type condition struct {
	Type, Status, Reason, Message string
}

// conditions returns status.conditions (entries that are not objects, or
// fields that are not strings, are skipped or left empty).
func conditions(u *unstructured.Unstructured) []condition {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := make([]condition, 0, len(list))
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		c := condition{}
		c.Type, _ = m["type"].(string)
		c.Status, _ = m["status"].(string)
		c.Reason, _ = m["reason"].(string)
		c.Message, _ = m["message"].(string)
		out = append(out, c)
	}
	return out
}

// find returns the first condition of type t.
func find(conds []condition, t string) (condition, bool) {
	for _, c := range conds {
		if c.Type == t {
			return c, true
		}
	}
	return condition{}, false
}

func str(u *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

// observed reports whether the object's controller has seen its latest
// generation (status.observedGeneration present and not behind).
func observed(u *unstructured.Unstructured) bool {
	og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return found && og >= u.GetGeneration()
}

// deploymentRule: a paused Deployment is Suspended (Argo CD); kstatus
// would report it InProgress for as long as it stays paused.
func deploymentRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	if p, _, _ := unstructured.NestedBool(u.Object, "spec", "paused"); p {
		return hs(v1alpha1.HealthStatusSuspended, "the Deployment is paused (spec.paused)"), true
	}
	return v1alpha1.HealthStatus{}, false
}

// daemonSetRule: with the OnDelete strategy the controller replaces a Pod
// only when someone deletes it, so status.updatedNumberScheduled may stay
// below the desired number forever: Healthy once the controller observed
// the generation (Argo CD, and kstatus' own rule for an OnDelete
// StatefulSet). kstatus would wait for every Pod to be updated.
func daemonSetRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	if str(u, "spec", "updateStrategy", "type") != "OnDelete" || !observed(u) {
		return v1alpha1.HealthStatus{}, false
	}
	updated, _, _ := unstructured.NestedInt64(u.Object, "status", "updatedNumberScheduled")
	desired, _, _ := unstructured.NestedInt64(u.Object, "status", "desiredNumberScheduled")
	return hs(v1alpha1.HealthStatusHealthy, fmt.Sprintf("OnDelete update strategy: %d of %d Pods run the current template", updated, desired)), true
}

// replicaSetRule: a ReplicaFailure condition (Pods that cannot be created:
// a quota, an admission denial) is Degraded (Argo CD); kstatus calls it
// InProgress.
func replicaSetRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	if !observed(u) {
		return v1alpha1.HealthStatus{}, false
	}
	if c, ok := find(conditions(u), "ReplicaFailure"); ok && c.Status == "True" {
		return hs(v1alpha1.HealthStatusDegraded, c.Message), true
	}
	return v1alpha1.HealthStatus{}, false
}

// jobHealth is Argo CD's: a Job is Progressing until its Complete
// (Healthy) or Failed (Degraded) condition is True, Suspended while
// spec.suspend is set. kstatus calls a started Job Current, which would let
// a sync move past a Job that is still running.
func jobHealth(u *unstructured.Unstructured) v1alpha1.HealthStatus {
	conds := conditions(u)
	if c, ok := find(conds, "Failed"); ok && c.Status == "True" {
		return hs(v1alpha1.HealthStatusDegraded, or(c.Message, c.Reason, "the Job failed"))
	}
	if c, ok := find(conds, "Complete"); ok && c.Status == "True" {
		return hs(v1alpha1.HealthStatusHealthy, or(c.Message, "the Job completed"))
	}
	if s, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); s {
		msg := "the Job is suspended (spec.suspend)"
		if c, ok := find(conds, "Suspended"); ok && c.Status == "True" {
			msg = or(c.Message, msg)
		}
		return hs(v1alpha1.HealthStatusSuspended, msg)
	}
	if str(u, "status", "startTime") == "" {
		return hs(v1alpha1.HealthStatusProgressing, "the Job has not started")
	}
	active, _, _ := unstructured.NestedInt64(u.Object, "status", "active")
	succeeded, _, _ := unstructured.NestedInt64(u.Object, "status", "succeeded")
	failed, _, _ := unstructured.NestedInt64(u.Object, "status", "failed")
	return hs(v1alpha1.HealthStatusProgressing, fmt.Sprintf("the Job is running: %d active, %d succeeded, %d failed", active, succeeded, failed))
}

func jobRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) { return jobHealth(u), true }

func podRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	return podHealth(u, isHook(u)), true
}

// cronJobRule: a suspended CronJob is Healthy, saying so, as Argo CD
// reports it (argo-cd#24428: Suspended would make the whole Application
// Suspended). Otherwise kstatus: a CronJob is Healthy once it exists; the
// outcome of its last scheduled run (Degraded in Argo CD's CronJob check)
// says nothing about what a sync applied and would fail syncs for a run of
// the previous version (argo-cd#25551).
func cronJobRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	if s, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); s {
		return hs(v1alpha1.HealthStatusHealthy, "the CronJob is suspended (spec.suspend)"), true
	}
	return v1alpha1.HealthStatus{}, false
}

// pvcRule: a claim that lost its volume is Degraded (Argo CD); kstatus
// calls every phase but Bound InProgress.
func pvcRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	if str(u, "status", "phase") == "Lost" {
		return hs(v1alpha1.HealthStatusDegraded, "the claim lost its volume (status.phase Lost)"), true
	}
	return v1alpha1.HealthStatus{}, false
}

// serviceRule: a LoadBalancer Service is Progressing until the load
// balancer publishes an address (Argo CD); kstatus only checks that a
// cluster IP is set. Other types are left to kstatus (Healthy).
func serviceRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	if str(u, "spec", "type") != "LoadBalancer" {
		return v1alpha1.HealthStatus{}, false
	}
	return loadBalanced(u, "the Service")
}

// ingressRule: an Ingress is Progressing until its controller publishes
// an address (Argo CD); kstatus knows no Ingress rule and calls it Current.
func ingressRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	return loadBalanced(u, "the Ingress")
}

func loadBalanced(u *unstructured.Unstructured, what string) (v1alpha1.HealthStatus, bool) {
	if ing, _, _ := unstructured.NestedSlice(u.Object, "status", "loadBalancer", "ingress"); len(ing) > 0 {
		return hs(v1alpha1.HealthStatusHealthy, what+" has a load balancer address"), true
	}
	return hs(v1alpha1.HealthStatusProgressing, "waiting for a load balancer address for "+what+" (status.loadBalancer.ingress)"), true
}

// apiServiceRule: an APIService is Healthy when its Available condition
// is True, Progressing otherwise (Argo CD): its API answers nothing until
// then. kstatus reads no Available condition and calls it Current.
func apiServiceRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	c, ok := find(conditions(u), "Available")
	if !ok {
		return hs(v1alpha1.HealthStatusProgressing, "waiting for kube-apiserver to check the APIService"), true
	}
	msg := strings.TrimPrefix(c.Reason+": "+c.Message, ": ")
	if c.Status == "True" {
		return hs(v1alpha1.HealthStatusHealthy, msg), true
	}
	return hs(v1alpha1.HealthStatusProgressing, msg), true
}

// hpaConditionsAnnotation holds an autoscaling/v1 HPA's conditions (v1
// has no status.conditions).
const hpaConditionsAnnotation = "autoscaling.alpha.kubernetes.io/conditions"

// hpaRule is Argo CD's HPA check with one change: an HPA whose scale target
// cannot be read or scaled, or whose selector is invalid, is Degraded; one
// that is able to scale (AbleToScale or ScalingLimited True) is Healthy;
// anything else is Progressing. Argo CD also calls an HPA that cannot read
// its metrics Degraded; deputy calls it Progressing, because a new HPA, or
// one whose Pods are being replaced, reports exactly that until the new
// Pods report metrics, and a Degraded resource fails the sync step
// (argo-cd#6287, argo-cd#28522). The health timeout still ends the wait,
// naming the HPA and its message. kstatus knows no HPA rule.
func hpaRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	if og, found, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); found && og < u.GetGeneration() {
		return v1alpha1.HealthStatus{}, false // kstatus: the generation is not observed yet
	}
	conds := conditions(u)
	if raw, ok := u.GetAnnotations()[hpaConditionsAnnotation]; ok && len(conds) == 0 {
		var list []condition
		if err := json.Unmarshal([]byte(raw), &list); err != nil {
			return hs(v1alpha1.HealthStatusUnknown, fmt.Sprintf("cannot read the annotation %s: %v", hpaConditionsAnnotation, err)), true
		}
		conds = list
	}
	for _, c := range conds {
		switch {
		case c.Type == "AbleToScale" && (c.Reason == "FailedGetScale" || c.Reason == "FailedUpdateScale"),
			c.Type == "ScalingActive" && c.Reason == "InvalidSelector":
			return hs(v1alpha1.HealthStatusDegraded, c.Message), true
		}
	}
	for _, c := range conds {
		if c.Type == "ScalingActive" && (strings.HasPrefix(c.Reason, "FailedGet") || c.Reason == "FailedComputeMetricsReplicas") {
			return hs(v1alpha1.HealthStatusProgressing, c.Message), true
		}
	}
	for _, c := range conds {
		if (c.Type == "AbleToScale" || c.Type == "ScalingLimited") && c.Status == "True" {
			return hs(v1alpha1.HealthStatusHealthy, c.Message), true
		}
	}
	return hs(v1alpha1.HealthStatusProgressing, "waiting for the autoscaler"), true
}

// workflowRule is Argo CD's for Argo Workflows (a common hook): by
// status.phase. kstatus reads no phase and calls a running Workflow
// Current.
func workflowRule(u *unstructured.Unstructured) (v1alpha1.HealthStatus, bool) {
	msg := str(u, "status", "message")
	switch phase := str(u, "status", "phase"); phase {
	case "", "Pending", "Running":
		return hs(v1alpha1.HealthStatusProgressing, or(msg, "the Workflow is running")), true
	case "Succeeded":
		return hs(v1alpha1.HealthStatusHealthy, msg), true
	case "Failed", "Error":
		return hs(v1alpha1.HealthStatusDegraded, or(msg, "the Workflow ended "+phase)), true
	default:
		return hs(v1alpha1.HealthStatusUnknown, fmt.Sprintf("the Workflow's phase %q is unknown", phase)), true
	}
}

// or returns the first non-empty string.
func or(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

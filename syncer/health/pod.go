package health

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/syncer/waves"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Annotations read here (Argo CD's and Helm's).
const (
	// annotationIgnoreRestartPolicy ("true") assesses a Pod whose
	// restartPolicy is OnFailure or Never as a long-running one, unless the
	// Pod is a hook.
	annotationIgnoreRestartPolicy = "argocd.argoproj.io/ignore-restart-policy"
)

// isHook reports whether u is a sync hook as Argo CD tells one: an
// argocd.argoproj.io/hook annotation other than Skip alone, or a Helm hook
// annotation other than crd-install.
func isHook(u *unstructured.Unstructured) bool { return waves.IsHook(u.GetAnnotations()) }

// podHealth is Argo CD's Pod health. A Pod with restartPolicy Always (the
// default) runs until deleted: Healthy once Ready, Degraded when a
// container keeps failing to start (a waiting reason Err…, …Error or
// …BackOff: ErrImagePull, ImagePullBackOff, CrashLoopBackOff,
// CreateContainerConfigError) or, while not Ready, has terminated before.
// A Pod with restartPolicy OnFailure or Never runs to completion (most are
// hooks): Progressing while it runs, however its containers fare, Healthy
// when it Succeeded; the annotation argocd.argoproj.io/ignore-restart-policy
// makes a non-hook one assessed as long-running. Any Pod that Failed is
// Degraded, a Pending one Progressing.
//
// Where kstatus differs, deputy follows Argo CD: kstatus calls a Failed Pod
// Current, a Pending one Failed once unschedulable for 15 seconds (Argo
// CD: Progressing, as a cluster autoscaler may yet add a node, and the
// health timeout bounds the wait), and a running OnFailure/Never Pod
// Current once Ready. A Pod without status.phase (not yet observed) is
// Progressing as in kstatus; Argo CD calls it Unknown.
func podHealth(u *unstructured.Unstructured, hook bool) v1alpha1.HealthStatus {
	msg := str(u, "status", "message")
	policy := or(str(u, "spec", "restartPolicy"), "Always")
	longRunning := policy == "Always" || (!hook && u.GetAnnotations()[annotationIgnoreRestartPolicy] == "true")
	containers := containerStatuses(u, "containerStatuses")
	if longRunning {
		var failing []string
		for _, c := range containers {
			r := c.waitingReason
			if strings.HasPrefix(r, "Err") || strings.HasSuffix(r, "Error") || strings.HasSuffix(r, "BackOff") {
				failing = append(failing, strings.TrimSuffix(fmt.Sprintf("container %q: %s: %s", c.name, r, c.waitingMessage), ": "))
			}
		}
		if len(failing) > 0 {
			return hs(v1alpha1.HealthStatusDegraded, strings.Join(failing, "; "))
		}
	}
	switch phase := str(u, "status", "phase"); phase {
	case "":
		return hs(v1alpha1.HealthStatusProgressing, "the Pod has no phase yet")
	case "Pending":
		return hs(v1alpha1.HealthStatusProgressing, or(msg, "the Pod is Pending"))
	case "Succeeded":
		return hs(v1alpha1.HealthStatusHealthy, or(msg, "the Pod succeeded"))
	case "Failed":
		if msg == "" {
			msg = podFailure(append(containerStatuses(u, "initContainerStatuses"), containers...))
		}
		return hs(v1alpha1.HealthStatusDegraded, or(msg, "the Pod failed"))
	case "Running":
		if !longRunning {
			return hs(v1alpha1.HealthStatusProgressing, or(msg, "the Pod is running"))
		}
		if c, ok := find(conditions(u), "Ready"); ok && c.Status == "True" {
			return hs(v1alpha1.HealthStatusHealthy, msg)
		}
		for _, c := range containers {
			if c.restarted {
				return hs(v1alpha1.HealthStatusDegraded, or(msg, fmt.Sprintf("container %q terminated and the Pod is not Ready", c.name)))
			}
		}
		return hs(v1alpha1.HealthStatusProgressing, or(msg, "the Pod is running but not Ready"))
	default:
		return hs(v1alpha1.HealthStatusUnknown, or(msg, fmt.Sprintf("the Pod's phase is %s", phase)))
	}
}

// container is what podHealth reads of a container status.
type container struct {
	name                          string
	waitingReason, waitingMessage string
	// restarted: lastState.terminated is set.
	restarted bool
	// terminated state, if any.
	terminated                      bool
	exitCode                        int64
	terminatedReason, terminatedMsg string
}

func containerStatuses(u *unstructured.Unstructured, field string) []container {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", field)
	out := make([]container, 0, len(list))
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		c := container{}
		c.name, _, _ = unstructured.NestedString(m, "name")
		c.waitingReason, _, _ = unstructured.NestedString(m, "state", "waiting", "reason")
		c.waitingMessage, _, _ = unstructured.NestedString(m, "state", "waiting", "message")
		_, c.restarted, _ = unstructured.NestedMap(m, "lastState", "terminated")
		_, c.terminated, _ = unstructured.NestedMap(m, "state", "terminated")
		c.exitCode, _, _ = unstructured.NestedInt64(m, "state", "terminated", "exitCode")
		c.terminatedReason, _, _ = unstructured.NestedString(m, "state", "terminated", "reason")
		c.terminatedMsg, _, _ = unstructured.NestedString(m, "state", "terminated", "message")
		out = append(out, c)
	}
	return out
}

// podFailure says why a failed Pod failed, from the first container that
// says so: its termination message, OOMKilled, or its exit code.
func podFailure(cs []container) string {
	for _, c := range cs {
		switch {
		case !c.terminated:
		case c.terminatedMsg != "":
			return c.terminatedMsg
		case c.terminatedReason == "OOMKilled":
			return fmt.Sprintf("container %q was OOMKilled", c.name)
		case c.exitCode != 0:
			return fmt.Sprintf("container %q exited with code %d", c.name, c.exitCode)
		}
	}
	return ""
}

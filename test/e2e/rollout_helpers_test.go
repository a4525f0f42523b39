package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// rollOutDeployments stands in for kube-controller-manager, which the e2e
// control plane does not run: until the test ends, every Deployment in
// namespace gets the status a finished rollout has (observedGeneration, all
// replicas updated, ready and available, conditions Available=True and
// Progressing=True/NewReplicaSetAvailable), written as the admin through
// the status subresource, as the Deployment controller would. The sync
// engine waits until a Deployment is healthy (kstatus); without this a sync
// of one would wait for its health timeout.
func rollOutDeployments(t *testing.T, namespace string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	cs := admin(t)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := cs.AppsV1().Deployments(namespace).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if d, ok := ev.Object.(*appsv1.Deployment); ok && !rolledOut(d) {
					markRolledOut(ctx, cs, d)
				}
			}
			w.Stop()
		}
	}()
}

func rolledOut(d *appsv1.Deployment) bool {
	return d.DeletionTimestamp != nil || d.Status.ObservedGeneration == d.Generation && len(d.Status.Conditions) == 2
}

// markRolledOut writes a finished rollout's status on d (best effort: a
// conflict means a newer version comes by the watch).
func markRolledOut(ctx context.Context, cs kubernetes.Interface, d *appsv1.Deployment) {
	d = d.DeepCopy()
	d.Status = rolledOutStatus(d)
	_, _ = cs.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
}

// rolledOutStatus is what the deployment controller writes once d's Pods
// are ready: every replica updated, ready and available for the current
// generation, Available=True (MinimumReplicasAvailable), Progressing=True
// (NewReplicaSetAvailable).
func rolledOutStatus(d *appsv1.Deployment) appsv1.DeploymentStatus {
	r := int32(1)
	if d.Spec.Replicas != nil {
		r = *d.Spec.Replicas
	}
	now := metav1.Now()
	return appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
				Message: "Deployment has minimum availability.", LastUpdateTime: now, LastTransitionTime: now},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable",
				Message: fmt.Sprintf("ReplicaSet %q has successfully progressed.", d.Name+"-5d4f8c7b9"), LastUpdateTime: now, LastTransitionTime: now},
		},
	}
}

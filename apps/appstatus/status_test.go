package appstatus

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// A comparison sets status.sync (revision for spec.source), the resources
// with the health the last operation recorded, reconciledAt, and removes a
// ComparisonError; a failed one sets Unknown and the condition, keeping the
// condition's first transition time while it stays.
func TestApplyComparison(t *testing.T) {
	app := &v1alpha1.Application{}
	healthy := &v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusHealthy}
	status := &v1alpha1.ApplicationStatus{Resources: []v1alpha1.ResourceStatus{{Kind: "ConfigMap", Namespace: "ns", Name: "a", Health: healthy}}}
	first := metav1.NewTime(time.Unix(1000, 0))
	ApplyComparison(status, app, nil, errors.New("cannot list configmaps"), first)
	if status.Sync.Status != v1alpha1.SyncStatusCodeUnknown || len(status.Conditions) != 1 ||
		status.Conditions[0].Type != v1alpha1.ApplicationConditionComparisonError || status.Conditions[0].Message != "cannot list configmaps" {
		t.Fatalf("after a failed comparison: %+v", status)
	}
	since := status.Conditions[0].LastTransitionTime
	ApplyComparison(status, app, nil, errors.New("cannot list secrets"), metav1.NewTime(time.Unix(2000, 0)))
	if c := status.Conditions[0]; c.Message != "cannot list secrets" || since == nil || !c.LastTransitionTime.Equal(since) {
		t.Errorf("a new message of the same condition: %+v", c)
	}
	cmp := &syncer.Comparison{Status: v1alpha1.SyncStatusCodeOutOfSync, Revisions: []string{"abc"}, Resources: []v1alpha1.ResourceStatus{
		{Kind: "ConfigMap", Namespace: "ns", Name: "a", Status: v1alpha1.SyncStatusCodeOutOfSync, Message: "changed in the cluster"},
		{Kind: "ConfigMap", Namespace: "ns", Name: "old", Status: v1alpha1.SyncStatusCodeOutOfSync, RequiresPruning: true},
	}}
	now := metav1.NewTime(time.Unix(3000, 0))
	ApplyComparison(status, app, cmp, nil, now)
	if status.Sync.Status != v1alpha1.SyncStatusCodeOutOfSync || status.Sync.Revision != "abc" || len(status.Conditions) != 0 ||
		!status.ReconciledAt.Equal(&now) || len(status.Resources) != 2 || status.Resources[0].Health != healthy || status.Resources[1].Health != nil {
		t.Errorf("after a comparison: %+v", status)
	}
	app.Spec.Sources = []v1alpha1.ApplicationSource{{RepoURL: "a"}, {RepoURL: "b"}}
	cmp.Revisions = []string{"r1", "r2"}
	ApplyComparison(status, app, cmp, nil, now)
	if status.Sync.Revision != "" || len(status.Sync.Revisions) != 2 {
		t.Errorf("spec.sources: %+v", status.Sync)
	}
}

func TestSetConditionReportsChanges(t *testing.T) {
	var st v1alpha1.ApplicationStatus
	if !SetCondition(&st, v1alpha1.ApplicationConditionDeletionError, "no delete") || SetCondition(&st, v1alpha1.ApplicationConditionDeletionError, "no delete") {
		t.Error("setting a condition, then the same again")
	}
	if SetCondition(&st, v1alpha1.ApplicationConditionComparisonError, "") || !SetCondition(&st, v1alpha1.ApplicationConditionDeletionError, "") || len(st.Conditions) != 0 {
		t.Errorf("removing: %+v", st.Conditions)
	}
}

package main

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
)

// TestCanIClusterRBACOnlyAfterNoOpinion: with --kubeconfig, can-i answers
// what the cluster's RBAC allows only when deputy answers no opinion; with
// authorization.defaultDecision Deny deputy denies first and kube-apiserver
// never asks its next authorizer.
func TestCanIClusterRBACOnlyAfterNoOpinion(t *testing.T) {
	clusterRBAC, err := policy.NewRBAC(policy.RBACObjects{
		ClusterRoles: []*rbacv1.ClusterRole{{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{{ObjectMeta: metav1.ObjectMeta{Name: "mallory-reads"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}}},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Build(&policy.Objects{}, true)
	if err != nil {
		t.Fatal(err)
	}
	cluster := &policy.ClusterState{RBAC: clusterRBAC, Synced: true}
	gate := deputyauthz.NewGate(deputyauthz.GateOptions{}, func() *policy.Snapshot { return snap }, func() *policy.ClusterState { return cluster })
	attrs := &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "mallory", Groups: []string{user.AllAuthenticated}},
		Verb: "list", Resource: "pods", Namespace: "team-a", APIVersion: "*", ResourceRequest: true}
	for _, tc := range []struct {
		deny bool
		want bool
		line string
	}{
		{deny: false, want: true, line: "the cluster's RBAC allows"},
		{deny: true, want: false, line: "deputy denies: authorization.defaultDecision is Deny"},
	} {
		d := canIDecider{gate: gate, snap: snap, cluster: cluster, what: "the test policy", deny: tc.deny}
		ok, lines := d.decide(context.Background(), attrs)
		if ok != tc.want || !strings.Contains(lines, tc.line) {
			t.Errorf("deny=%v: allowed %v, want %v; lines:\n%s(want a line with %q)", tc.deny, ok, tc.want, lines, tc.line)
		}
	}
}

package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestWhoCan(t *testing.T) {
	examples := filepath.Join("..", "..", "examples")
	argocd := []string{"--config", filepath.Join(examples, "config", "argocd.yaml"), "--policy", filepath.Join(examples, "argocd"), "--policy", filepath.Join(examples, "bootstrap.yaml")}
	tests := []struct {
		name    string
		args    []string
		want    []string
		notWant []string
	}{
		{
			name: "a RoleBinding's subject is named with the binding and the rule",
			args: []string{"who-can", "list", "pods", "-n", "team-a"},
			want: []string{"User/alice", `RoleBinding "alice-pod-reader/team-a" of ClusterRole "pod-reader"`, `{APIGroups:[""], Resources:["pods" "pods/log"], Verbs:["get" "list" "watch"]}`},
		},
		{
			name:    "without a namespace only ClusterRoleBindings apply",
			args:    []string{"who-can", "list", "pods"},
			want:    []string{"nobody may list pods", "cluster-wide only: without -n NS no RoleBinding is read"},
			notWant: []string{"alice"},
		},
		{
			name: "impersonate:serviceaccount on a bare resource is checked in authentication.k8s.io",
			args: append([]string{"who-can", "impersonate:serviceaccount", "serviceaccounts/guestbook-deployer", "-n", "guestbook"}, argocd...),
			want: []string{"ServiceAccount/argocd/argocd-application-controller  AppProject argoproj.io argocd/guestbook destinationServiceAccounts[0]"},
		},
		{
			name: "system:authenticated is expanded to the users the policy names",
			args: []string{"who-can", "get", "/healthz"},
			want: []string{"Group/system:authenticated", "group system:authenticated (every authenticated user): alice,", "group system:unauthenticated (every unauthenticated request: user system:anonymous): system:anonymous"},
		},
		{
			name: "impersonation: the sync identity with its AppProject entry, for both checks",
			args: append([]string{"who-can", "impersonate", "serviceaccounts/guestbook-deployer", "-n", "guestbook"}, argocd...),
			want: []string{
				"constrained impersonation, kube-apiserver 1.36+ (impersonate:serviceaccount):",
				"ServiceAccount/argocd/argocd-application-controller  AppProject argoproj.io argocd/guestbook destinationServiceAccounts[0] derives system:serviceaccount:guestbook:guestbook-deployer",
				"legacy impersonation, the fallback (impersonate):\nnobody may impersonate serviceaccounts",
				"not allowed: ServiceAccount/argocd/argocd-application-controller: deputy impersonation gate: system:serviceaccount:argocd:argocd-application-controller may impersonate only through constrained impersonation",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
	t.Run("-o json", func(t *testing.T) {
		code, out, errOut := runCLI(t, "who-can", "list", "pods", "-n", "team-a", "-o", "json")
		var report []whoCanCheck
		if code != 0 || json.Unmarshal([]byte(out), &report) != nil {
			t.Fatalf("exit %d, not JSON:\n%s%s", code, out, errOut)
		}
		if len(report) != 1 || len(report[0].Grants) != 1 || report[0].Grants[0].User != "alice" || report[0].Grants[0].Binding.Name != "alice-pod-reader" {
			t.Errorf("report %+v, want alice through alice-pod-reader", report)
		}
	})
}

func TestCanIList(t *testing.T) {
	examples := filepath.Join("..", "..", "examples")
	t.Run("the rules of alice's bindings as kubectl prints them, with the binding", func(t *testing.T) {
		code, out, errOut := runCLI(t, "can-i", "--list", "-n", "team-a", "--as", "alice")
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		for _, w := range []string{
			"Resources                                      Non-Resource URLs  Resource Names  Verbs             Binding",
			`pods                                           []                 []              [get list watch]  RoleBinding "alice-pod-reader/team-a" of ClusterRole "pod-reader" to User "alice"`,
			`[/healthz]         []              [get]             ClusterRoleBinding "system:public-info-viewer"`,
			"Impersonation through deputy's gate:\n  strict mode",
		} {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	})
	t.Run("another namespace: alice's RoleBinding does not apply", func(t *testing.T) {
		_, out, _ := runCLI(t, "can-i", "--list", "-n", "team-b", "--as", "alice")
		if strings.Contains(out, "alice-pod-reader") {
			t.Errorf("output names alice-pod-reader:\n%s", out)
		}
	})
	t.Run("a sync identity: its AppProjects", func(t *testing.T) {
		code, out, errOut := runCLI(t, "can-i", "--list", "--as", "system:serviceaccount:argocd:argocd-application-controller",
			"--config", filepath.Join(examples, "config", "argocd.yaml"), "--policy", filepath.Join(examples, "argocd"))
		if code != 0 || !strings.Contains(out, "AppProject argoproj.io argocd/guestbook\n    destinationServiceAccounts[0] server \"https://kubernetes.default.svc\", namespace \"guestbook\" -> guestbook:guestbook-deployer") {
			t.Errorf("exit %d\n%s%s", code, out, errOut)
		}
	})
	t.Run("--list takes no VERB or RESOURCE", func(t *testing.T) {
		code, _, errOut := runCLI(t, "can-i", "--list", "get", "pods", "--as", "alice")
		if code == 0 || !strings.Contains(errOut, "can-i --list takes no VERB or RESOURCE") {
			t.Errorf("exit %d, stderr %s", code, errOut)
		}
	})
}

package syncer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"deputy.dev/deputy/syncer/permissions"
)

// golden compares got with testdata/name; UPDATE_GOLDEN=1 rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; UPDATE_GOLDEN=1 rewrites it):\n%s", path, diff)
	}
}

func TestPreflightReport(t *testing.T) {
	const who = "system:serviceaccount:guestbook:guestbook-deployer"
	t.Run("one missing permission names it, and the Role grants everything the sync needs", func(t *testing.T) {
		got := permissions.Report(who, "argocd", "guestbook", []missingPermission{
			{Verb: "create", Resource: "services", Namespace: "guestbook", Objects: []string{"Service guestbook/guestbook-ui"}},
		}, nil, []missingPermission{
			{Verb: "get", Resource: "services", Namespace: "guestbook"},
			{Verb: "list", Resource: "services", Namespace: "guestbook"},
			{Verb: "create", Resource: "services", Namespace: "guestbook"},
			{Verb: "patch", Resource: "services", Namespace: "guestbook"},
		})
		golden(t, "preflight_one.golden", got)
	})
	t.Run("many permissions in several namespaces and cluster-scoped", func(t *testing.T) {
		missing := []missingPermission{
			{Verb: "patch", Group: "apps", Resource: "deployments", Namespace: "guestbook", Objects: []string{"Deployment.apps guestbook/a", "Deployment.apps guestbook/b", "Deployment.apps guestbook/c", "Deployment.apps guestbook/d"}},
			{Verb: "create", Group: "apps", Resource: "deployments", Namespace: "guestbook", Objects: []string{"Deployment.apps guestbook/a"}},
			{Verb: "patch", Resource: "configmaps", Namespace: "guestbook", Names: []string{"settings"}, Objects: []string{"ConfigMap guestbook/settings"}},
			{Verb: "create", Resource: "services", Namespace: "guestbook"},
			{Verb: "delete", Resource: "configmaps", Namespace: "guestbook-staging", Names: []string{"old"}, Objects: []string{"ConfigMap guestbook-staging/old (prune)"}},
			{Verb: "list", Resource: "configmaps", Namespace: "guestbook-staging"},
			{Verb: "create", Resource: "namespaces", Objects: []string{"Namespace guestbook-staging (syncOptions CreateNamespace=true)"}},
			{Verb: "get", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Names: []string{"widgets.example.com"}},
		}
		permissions.Sort(missing)
		var needed []missingPermission
		for _, r := range []struct{ group, resource, ns string }{{"apps", "deployments", "guestbook"}, {"", "configmaps", "guestbook"}, {"", "services", "guestbook"}, {"", "configmaps", "guestbook-staging"}} {
			for _, v := range []string{"get", "list", "create", "patch"} {
				needed = append(needed, missingPermission{Verb: v, Group: r.group, Resource: r.resource, Namespace: r.ns})
			}
		}
		needed = append(needed,
			missingPermission{Verb: "delete", Resource: "configmaps", Namespace: "guestbook-staging"},
			missingPermission{Verb: "create", Resource: "namespaces"},
			missingPermission{Verb: "get", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Names: []string{"widgets.example.com"}},
			missingPermission{Verb: "create", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Names: []string{"widgets.example.com"}},
			missingPermission{Verb: "patch", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Names: []string{"widgets.example.com"}},
		)
		permissions.Sort(needed)
		got := permissions.Report(who, "argocd", "guestbook", missing, []string{"prune: cannot list widgets.example.com in namespace guestbook: the server is on fire"}, needed)
		golden(t, "preflight_many.golden", got)
	})
	t.Run("the controller identity is bound as a user", func(t *testing.T) {
		got := permissions.Report("alice", "argocd", "app", []missingPermission{{Verb: "patch", Resource: "configmaps", Namespace: "x"}}, nil, nil)
		if !strings.Contains(got, "kind: User\n  name: alice") {
			t.Errorf("subject:\n%s", got)
		}
	})
	t.Run("problems alone are reported without RBAC objects", func(t *testing.T) {
		got := permissions.Report(who, "argocd", "app", nil, []string{"prune: cannot list configmaps in namespace x: boom"}, nil)
		if strings.Contains(got, "kind: Role") || !strings.Contains(got, "boom") {
			t.Errorf("report:\n%s", got)
		}
	})
}

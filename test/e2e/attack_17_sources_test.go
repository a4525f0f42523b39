package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/test/framework"
)

// Issue 14 (multiple sources), attacks 17-18: what a tenant's
// spec.sources makes deputy read. Every source is checked against the
// AppProject before anything is fetched, ref sources included, and a
// $values path never leaves the ref source's repository.

// Attack 17. The tenant adds a ref source pointing at a repository its
// project does not permit (another team's values, or an attacker's server
// that logs deputy's fetches), hoping that a source that renders nothing
// itself escapes the sourceRepos check. It is refused before any fetch,
// naming the source and sourceRepos; nothing reaches the cluster. The
// controller's revision detection refuses it the same way.
func TestAttack17UnpermittedRefSourceIsRefusedBeforeAnyFetch(t *testing.T) {
	const ns, sa = "attack-sources", "sources-deployer"
	saUser := "system:serviceaccount:" + ns + ":" + sa
	ensureNamespace(t, ns)
	serviceAccountToken(t, ns, sa)
	var hits atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "not a repository", http.StatusNotFound)
	}))
	t.Cleanup(evil.Close)
	charts := newGitRepo(t)
	for name, content := range sourcesChart {
		charts.write(name, content)
	}
	charts.commit("chart")
	project := syncProject(t, "attack-sources", v1alpha1.AppProjectSpec{
		SourceRepos:                []string{charts.dir},
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, sa)},
	})
	waitForGate(t, saUser)
	engine, _ := newSyncEngine(t, enforced)
	since := time.Now()
	unpermitted := evil.URL + "/team-a/values.git"
	app := multiSourceApp("a17-ref", "attack-sources", charts.dir, unpermitted, ns)

	st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
	wantRefused(t, st, "spec.sources[1] ("+unpermitted+", ref values)", "application repo "+unpermitted+" is not permitted in project 'attack-sources'", "spec.sourceRepos")
	if _, err := engine.ResolveRevisions(t.Context(), app, project); err == nil || !strings.Contains(err.Error(), "is not permitted") {
		t.Errorf("ResolveRevisions = %v, want the sourceRepos refusal", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the unpermitted repository was fetched %d times", n)
	}
	if writes := auditedWrites(t, since, 0, func(ev framework.AuditEvent) bool {
		return ev.Verb != "get" && ev.Verb != "list" && ev.Verb != "watch" && ev.ObjectRef != nil && ev.ObjectRef.Namespace == ns
	}); len(writes) != 0 {
		t.Errorf("the cluster was written: %v", writes)
	}
}

// Attack 18. The tenant's Helm source reads $values/../../... hoping to
// climb out of the ref source's repository into the chart's repository, the
// cache of mirrors or the host. It is refused before any fetch, naming the
// value file and the fix.
func TestAttack18RefValueFileCannotLeaveTheRefRepository(t *testing.T) {
	const ns, sa = "attack-sources", "sources-deployer"
	ensureNamespace(t, ns)
	charts, values := newGitRepo(t), newGitRepo(t)
	for name, content := range sourcesChart {
		charts.write(name, content)
	}
	charts.write("secret.yaml", "greeting: the chart repository's secret\n")
	charts.commit("chart")
	values.write("web/values.yaml", "greeting: hi\n")
	values.commit("values")
	project := syncProject(t, "attack-sources-escape", v1alpha1.AppProjectSpec{
		Destinations:               dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, sa)},
	})
	engine, _ := newSyncEngine(t, enforced)
	for _, file := range []string{"$values/../" + strings.TrimPrefix(charts.dir, repoRoot+"/") + "/secret.yaml", "$values/../../../../etc/passwd", "$values/web/../../x.yaml"} {
		t.Run(file, func(t *testing.T) {
			app := multiSourceApp("a18-escape", "attack-sources-escape", charts.dir, values.dir, ns)
			app.Spec.Sources[0].Helm.ValueFiles = []string{file}
			st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
			wantRefused(t, st, "spec.sources[0].helm.valueFiles[0]", "must stay inside that source's repository")
		})
	}
}

package syncer

import (
	"strings"
	"testing"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

func TestProjectCheckMessagesAreUpstreams(t *testing.T) {
	p := &v1alpha1.AppProject{Spec: v1alpha1.AppProjectSpec{SourceRepos: []string{"https://github.com/team/*"},
		Destinations: []v1alpha1.ApplicationDestination{{Server: "https://kubernetes.default.svc", Namespace: "team-*"}, {Server: "*", Namespace: "!team-secret"}}}}
	p.Name = "team"
	c, err := policy.CompileAppProject(p)
	if err != nil {
		t.Fatal(err)
	}
	err = checkSource(c, v1alpha1.ApplicationSource{RepoURL: "https://github.com/other/app"})
	if err == nil || !strings.HasPrefix(err.Error(), "application repo https://github.com/other/app is not permitted in project 'team'") {
		t.Errorf("source: %v", err)
	}
	if err := checkDestination(c, "team", "https://kubernetes.default.svc", "", "team-a"); err != nil {
		t.Errorf("team-a: %v", err)
	}
	err = checkDestination(c, "team", "https://kubernetes.default.svc", "", "team-secret")
	if err == nil || !strings.HasPrefix(err.Error(), "application destination server 'https://kubernetes.default.svc' and namespace 'team-secret' do not match any of the allowed destinations in project 'team'") {
		t.Errorf("a negated namespace: %v", err)
	}
}

func TestSyncOptions(t *testing.T) {
	o := parseSyncOptions(&v1alpha1.SyncPolicy{SyncOptions: []string{"CreateNamespace=true", "Prune=false", "ServerSideApply=true"}})
	if !o.createNamespace || !o.pruneDisabled {
		t.Errorf("options = %+v", o)
	}
	if o := parseSyncOptions(nil); o.createNamespace || o.pruneDisabled {
		t.Errorf("nil policy: %+v", o)
	}
}

package syncer

import (
	"strings"
	"testing"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

func TestNormalizeGitURLIsArgoCDs(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/argoproj/argo-cd.git":    "https://github.com/argoproj/argo-cd",
		"  HTTPS://GitHub.com/ArgoProj/Argo-CD.git ": "https://github.com/argoproj/argo-cd",
		"https://github.com/argoproj/argo-cd":        "https://github.com/argoproj/argo-cd",
		"git@github.com:argoproj/argo-cd.git":        "git@github.com/argoproj/argo-cd",
		"ssh://git@github.com/argoproj/argo-cd.git":  "git@github.com/argoproj/argo-cd",
		"https://github.com/argoproj/*":              "https://github.com/argoproj/*",
		"*":                                          "*",
		"file:///srv/git/app.git":                    "file:///srv/git/app",
		"/srv/git/app":                               "/srv/git/app",
		"https://host/a b":                           "https://host/a%20b",
		// net/url rejects a non-numeric port: upstream normalises to "".
		"ssh://git@github.com:argoproj/test": "",
		"https://host:port/x":                "",
	} {
		if got := normalizeGitURL(in); got != want {
			t.Errorf("normalizeGitURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// The cases of Argo CD's TestAppProject_IsSourcePermitted and
// TestAppProject_IsNegatedSourcePermitted, plus local repositories.
func TestSourcePermittedIsArgoCDs(t *testing.T) {
	for _, tc := range []struct {
		repos []string
		src   string
		want  bool
	}{
		{[]string{"*"}, "https://github.com/argoproj/test.git", true},
		{[]string{"https://github.com/argoproj/test.git"}, "https://github.com/argoproj/test.git", true},
		{[]string{"ssh://git@GITHUB.com:argoproj/test"}, "ssh://git@github.com:argoproj/test", true},
		{[]string{"https://github.com/argoproj/*"}, "https://github.com/argoproj/argoproj.git", true},
		{[]string{"https://github.com/test1/test.git", "https://github.com/test2/test.git"}, "https://github.com/test2/test.git", true},
		{[]string{"https://github.com/argoproj/test1.git"}, "https://github.com/argoproj/test2.git", false},
		{[]string{"https://github.com/argoproj/*.git"}, "https://github.com/argoproj1/test2.git", false},
		{[]string{"https://github.com/argoproj/foo"}, "https://github.com/argoproj/foo1", false},
		{[]string{"https://gitlab.com/group/*"}, "https://gitlab.com/group/repo/owner", false},
		{[]string{"https://gitlab.com/group/*/*"}, "https://gitlab.com/group/repo/owner", true},
		{[]string{"https://gitlab.com/group/*/*/*"}, "https://gitlab.com/group/sub-group/repo/owner", true},
		{[]string{"https://gitlab.com/group/**"}, "https://gitlab.com/group/sub-group/repo/owner", true},

		{[]string{"!https://github.com/argoproj/test.git"}, "https://github.com/argoproj/test.git", false},
		{[]string{"!ssh://git@GITHUB.com:argoproj/test"}, "ssh://git@github.com:argoproj/test", false},
		{[]string{"!https://github.com/argoproj/*"}, "https://github.com/argoproj/argoproj.git", false},
		{[]string{"https://github.com/test1/test.git", "!https://github.com/test2/test.git"}, "https://github.com/test2/test.git", false},
		{[]string{"!https://github.com/argoproj/foo*"}, "https://github.com/argoproj/foo1", false},
		{[]string{"!https://gitlab.com/group/*/*"}, "https://gitlab.com/group/repo/owner", false},
		{[]string{"!https://gitlab.com/group/**"}, "https://gitlab.com/group/sub-group/repo/owner", false},
		{[]string{"https://github.com/argoproj/test1.git", "*"}, "https://github.com/argoproj/test2.git", true},
		{[]string{"!https://github.com/argoproj/*.git", "*"}, "https://github.com/argoproj1/test2.git", true},
		{[]string{"*", "!https://github.com/argoproj/*"}, "https://github.com/argoproj/x", false},

		{[]string{"git@github.com:argoproj/test.git"}, "git@GitHub.com:argoproj/test", true},
		{[]string{"file:///srv/git/*"}, "file:///srv/git/app.git", true},
		{[]string{"file:///srv/git/*"}, "file:///srv/git/team/app", false},
		{[]string{"/srv/git/**"}, "/srv/git/team/app", true},
		{nil, "https://github.com/argoproj/test.git", false},
	} {
		p := &v1alpha1.AppProject{Spec: v1alpha1.AppProjectSpec{SourceRepos: tc.repos}}
		if got := sourcePermitted(p, tc.src); got != tc.want {
			t.Errorf("sourceRepos %q, repo %q: permitted = %t, want %t", tc.repos, tc.src, got, tc.want)
		}
	}
}

func TestProjectCheckMessagesAreUpstreams(t *testing.T) {
	p := &v1alpha1.AppProject{Spec: v1alpha1.AppProjectSpec{SourceRepos: []string{"https://github.com/team/*"},
		Destinations: []v1alpha1.ApplicationDestination{{Server: "https://kubernetes.default.svc", Namespace: "team-*"}, {Server: "*", Namespace: "!team-secret"}}}}
	p.Name = "team"
	err := checkSource(p, v1alpha1.ApplicationSource{RepoURL: "https://github.com/other/app"})
	if err == nil || !strings.HasPrefix(err.Error(), "application repo https://github.com/other/app is not permitted in project 'team'") {
		t.Errorf("source: %v", err)
	}
	c, err := policy.CompileAppProject(p)
	if err != nil {
		t.Fatal(err)
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

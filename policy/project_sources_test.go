package policy

import (
	"testing"

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

		// OCI chart repositories (spec.source.chart with oci://HOST/PATH)
		// match as any repoURL string does.
		{[]string{"oci://registry.example.com/charts"}, "oci://registry.example.com/charts", true},
		{[]string{"oci://registry.example.com/*"}, "oci://Registry.example.com/charts", true},
		{[]string{"oci://registry.example.com/*"}, "oci://registry.example.com/team/charts", false},
		{[]string{"https://registry.example.com/*"}, "oci://registry.example.com/charts", false},
		{[]string{"*", "!oci://registry.example.com/**"}, "oci://registry.example.com/team/charts", false},
	} {
		c, err := CompileAppProject(&v1alpha1.AppProject{Spec: v1alpha1.AppProjectSpec{SourceRepos: tc.repos}})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.SourcePermitted(tc.src); got != tc.want {
			t.Errorf("sourceRepos %q, repo %q: permitted = %t, want %t", tc.repos, tc.src, got, tc.want)
		}
	}
}

// sourceRepos patterns go through the same guarded compiler as every other
// project glob: one that would crash gobwas/glob, or does not compile,
// matches nothing (so its negation matches everything, as upstream).
func TestSourcePermittedSurvivesBrokenPatterns(t *testing.T) {
	for _, tc := range []struct {
		repos []string
		src   string
		want  bool
	}{
		{[]string{"https://x/{0*0*0,0}"}, "https://x/0", false},
		{[]string{"https://x/a{"}, "https://x/a", false},
		{[]string{"https://x/["}, "https://x/[", false},
		{[]string{"!https://x/[", "https://x/*"}, "https://x/y", true},
	} {
		c, err := CompileAppProject(&v1alpha1.AppProject{Spec: v1alpha1.AppProjectSpec{SourceRepos: tc.repos}})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.SourcePermitted(tc.src); got != tc.want {
			t.Errorf("sourceRepos %q, repo %q: permitted = %t, want %t", tc.repos, tc.src, got, tc.want)
		}
	}
}

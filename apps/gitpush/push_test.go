package gitpush

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// sameRepository says whether two repository URLs name the same repository,
// as the handler decides it.
func sameRepository(a, b string) bool {
	ka := RepositoryKey(a)
	return ka != "" && ka == RepositoryKey(b)
}

func TestRepositoryURLNormalisation(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"https://github.com/org/repo", "https://github.com/org/repo.git", true},
		{"https://github.com/org/repo", "https://github.com/org/repo/", true},
		{"https://github.com/org/repo", "https://GitHub.COM/org/repo", true},
		{"https://github.com/org/repo", "https://github.com/Org/Repo", true}, // Argo CD compares case-insensitively
		{"https://github.com/org/repo", "git@github.com:org/repo.git", true},
		{"https://github.com/org/repo", "ssh://git@github.com/org/repo", true},
		{"https://github.com/org/repo", "ssh://git@github.com:22/org/repo.git", true},
		{"https://github.com/org/repo", "ssh://git@ssh.github.com:443/org/repo.git", true},
		{"https://github.com/org/repo", "git://github.com/org/repo.git", true},
		{"https://github.com/org/repo", "http://github.com/org/repo", true},
		{"https://github.com/org/repo", "https://user:token@github.com/org/repo.git", true},
		{"https://github.com/org/repo", "https://github.com:443/org/repo", true},
		{"https://github.com/org/repo", " https://github.com/org/repo ", true},
		{"https://github.com/org/repo", "https://github.com//org/repo", true},
		{"https://github.com/org/repo", "github.com:org/repo", true},
		{"https://gitlab.example.com/group/sub/repo", "git@gitlab.example.com:group/sub/repo.git", true},
		{"https://gitlab.example.com/group/sub/repo", "ssh://git@gitlab.example.com:2222/group/sub/repo.git", true},
		{"https://github.com/org/repo", "https://github.com/org/repo2", false},
		{"https://github.com/org/repo", "https://github.com/other/repo", false},
		{"https://github.com/org/repo", "https://gitlab.com/org/repo", false},
		{"https://github.com/org/repo", "https://github.com/org", false},
		{"https://github.com/org/repo", "https://github.com/org/repo/sub", false},
		{"https://github.com/org/repo", "https://api.github.com/repos/org/repo", false},
		{"https://github.com/org/repo", "/org/repo", false},
		{"https://github.com/org/repo", "file:///org/repo", false},
		{"file:///srv/git/repo", "/srv/git/repo", true},
		{"file:///srv/git/repo", "/srv/git/repo.git/", true},
		{"file:///srv/git/repo", "file://localhost/srv/git/repo", true},
		{"file:///srv/git/repo", "/srv/git/Repo", false}, // local paths keep their case
		{"file:///srv/git/repo", "srv/git/repo", false},
		{"file:///srv/git/repo", "file://otherhost/srv/git/repo", false},
		{"", "", false},
		{"https://github.com", "https://github.com/", false},
		{"https://", "https://", false},
		{"https://github.com/%zz", "https://github.com/%zz", false},
		{"C:/repos/x", "C:/repos/x", true}, // a drive letter, not scp-like
		{"C:/repos/x", "c@c:repos/x", false},
	} {
		t.Run(fmt.Sprintf("%q vs %q", tc.a, tc.b), func(t *testing.T) {
			if got := sameRepository(tc.a, tc.b); got != tc.same {
				t.Errorf("sameRepository = %v (keys %q, %q), want %v", got, RepositoryKey(tc.a), RepositoryKey(tc.b), tc.same)
			}
			if got := sameRepository(tc.b, tc.a); got != tc.same {
				t.Errorf("sameRepository reversed = %v, want %v", got, tc.same)
			}
		})
	}
}

func TestRevisionMatches(t *testing.T) {
	branch := Push{Ref: "refs/heads/main", Revision: "main", RefType: RefBranch, DefaultBranch: "main", TouchedHead: true}
	feature := Push{Ref: "refs/heads/feature/x", Revision: "feature/x", RefType: RefBranch, DefaultBranch: "main"}
	tag := Push{Ref: "refs/tags/v1", Revision: "v1", RefType: RefTag, DefaultBranch: "main"}
	bare := Push{Ref: "v1", Revision: "v1", RefType: RefUnknown}
	sha := "fd489864e7642b48eaad6e3f155c10e46810ec72"
	for _, tc := range []struct {
		target string
		push   Push
		want   bool
	}{
		{"", branch, true}, {"HEAD", branch, true}, {"main", branch, true}, {"refs/heads/main", branch, true},
		{"refs/tags/main", branch, false}, {"Main", branch, false}, {"head", branch, false},
		{"", feature, false}, {"HEAD", feature, false}, {"feature/x", feature, true}, {"refs/heads/feature/x", feature, true},
		{"x", feature, false}, {"feature", feature, false},
		{"v1", tag, true}, {"refs/tags/v1", tag, true}, {"refs/heads/v1", tag, false}, {"HEAD", tag, false},
		{"v1", bare, true}, {"refs/tags/v1", bare, true}, {"refs/heads/v1", bare, true}, {"HEAD", bare, false},
		{sha, Push{Ref: sha, Revision: sha, RefType: RefUnknown}, false},
		{sha, Push{Ref: "refs/heads/" + sha, Revision: sha, RefType: RefBranch}, false},
	} {
		if got := RevisionMatches(tc.target, tc.push); got != tc.want {
			t.Errorf("RevisionMatches(%q, push of %s) = %v, want %v", tc.target, tc.push.Ref, got, tc.want)
		}
	}
}

var simpleRepoKey = regexp.MustCompile(`^[a-z0-9-]+(\.[a-z0-9-]+)+/[a-z0-9_-]+(/[a-z0-9_-]+)*$`)

// FuzzRepositoryKey checks the normalisation: no panic, symmetric, reflexive for
// every URL that names a repository, and for a plain host/path every spelling
// (https, scp-like, ssh with port and user, .git, trailing slash, upper case)
// is the same repository.
func FuzzRepositoryKey(f *testing.F) {
	for _, s := range []string{
		"https://github.com/org/repo", "git@github.com:org/repo.git", "ssh://git@ssh.github.com:443/Org/Repo/",
		"file:///srv/git/x", "/srv/git/x.git", "C:/x", "github.com:org/repo", "https://", "", "git@[::1]:a/b",
		"https://u:p@h.example:99/a/../b/./c.git/", "ssh.ssh.example.com:a", "x.git.git", "https://github.com/%2e%2e/x",
	} {
		f.Add(s, "https://github.com/org/repo")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka := RepositoryKey(a)
		if sameRepository(a, b) != sameRepository(b, a) {
			t.Fatalf("sameRepository(%q, %q) is not symmetric", a, b)
		}
		if sameRepository(a, a) != (ka != "") {
			t.Fatalf("sameRepository(%q, itself) = %v with key %q", a, sameRepository(a, a), ka)
		}
		if strings.HasSuffix(ka, "/") {
			t.Fatalf("RepositoryKey(%q) = %q keeps a trailing /", a, ka)
		}
		if !simpleRepoKey.MatchString(ka) || strings.HasPrefix(ka, "ssh.") || strings.HasPrefix(ka, "altssh.") {
			return
		}
		host, p, _ := strings.Cut(ka, "/")
		for _, v := range []string{
			"https://" + host + "/" + p,
			"HTTPS://" + strings.ToUpper(host) + "/" + strings.ToUpper(p) + ".git/",
			"git@" + host + ":" + p + ".git",
			host + ":" + p,
			"ssh://git@" + host + ":2222/" + p,
			"git://" + host + "/" + p + "/",
			"https://user:secret@" + host + ":8443//" + p,
		} {
			if got := RepositoryKey(v); got != ka {
				t.Fatalf("RepositoryKey(%q) = %q, want %q (the key of %q)", v, got, ka, a)
			}
		}
	})
}

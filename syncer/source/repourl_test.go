package source

import (
	"context"
	"strings"
	"testing"
)

// A credential applies where scheme, host and port are the same and the
// repository's path is the credential's path or below it on a '/'
// boundary; the attacker spellings of issue 11 get nothing.
func TestCredentialMatching(t *testing.T) {
	creds := []RepoCredential{
		{URL: "https://git.example.com"},                 // 0: the whole host
		{URL: "https://git.example.com/team-a"},          // 1
		{URL: "https://git.example.com/team-a/app.git/"}, // 2: one repository (trailing slash)
		{URL: "https://git.example.com:8443/team-b"},     // 3: another port
		{URL: "http://127.0.0.1:3000/local"},             // 4: plain http on loopback
		{URL: "https://[2001:db8::1]/v6"},                // 5: IPv6
		{URL: "oci://registry.example.com/charts"},       // 6: an OCI registry's charts
	}
	for _, tc := range []struct {
		name, url string
		want      int
	}{
		{"the host's root", "https://git.example.com/other/app.git", 0},
		{"the path itself", "https://git.example.com/team-a", 1},
		{"the path with a trailing slash", "https://git.example.com/team-a/", 1},
		{"a repository below the path", "https://git.example.com/team-a/x.git", 1},
		{"the longest path wins", "https://git.example.com/team-a/app.git", 2},
		{"below the longest path", "https://git.example.com/team-a/app.git/info", 2},
		{"the default port spelled out", "https://git.example.com:443/team-a/x.git", 1},
		{"a zero-padded default port", "https://git.example.com:0443/team-a/x.git", 1},
		{"the host in capitals (host names fold case)", "https://GIT.Example.COM/team-a/x.git", 1},
		{"the scheme in capitals", "HTTPS://git.example.com/team-a/x.git", 1},
		{"a percent-encoded letter decodes to the same path", "https://git.example.com/team%2Da/x.git", 1},
		{"a non-default port needs its own credential", "https://git.example.com:8443/team-b/x.git", 3},
		{"loopback over http", "http://127.0.0.1:3000/local/r.git", 4},
		{"an IPv6 host", "https://[2001:db8::1]/v6/r.git", 5},
		{"an OCI chart repository", "oci://registry.example.com/charts", 6},
		{"an OCI chart repository below", "oci://registry.example.com/charts/team", 6},
		{"the OCI default port spelled out", "oci://registry.example.com:443/charts", 6},

		// Attacker spellings.
		{"a path sharing a prefix", "https://git.example.com/team-a-evil/x.git", 0},
		{"the path in other case (paths are case-sensitive)", "https://git.example.com/TEAM-A/x.git", 0},
		{"a host suffix", "https://git.example.com.attacker.net/team-a/x.git", -1},
		{"a host prefix", "https://evilgit.example.com/team-a/x.git", -1},
		{"a subdomain", "https://x.git.example.com/team-a/x.git", -1},
		{"another port", "https://git.example.com:444/team-a/x.git", -1},
		{"the credential's host as user info", "https://git.example.com@attacker.net/team-a/x.git", -1},
		{"plain http to the same host", "http://git.example.com/team-a/x.git", -1},
		{"the other port's credential on the default port", "https://git.example.com/team-b/x.git", 0},
		{"dot segments out of the path", "https://git.example.com/team-a/../team-c/x.git", -1},
		{"encoded dot segments", "https://git.example.com/team-a/%2e%2e/team-c/x.git", -1},
		{"an encoded slash", "https://git.example.com/team-a%2F..%2Fteam-c/x.git", -1},
		{"a backslash", `https://git.example.com/team-a\..\team-c/x.git`, -1},
		{"an encoded backslash", "https://git.example.com/team-a%5C..%5Cteam-c/x.git", -1},
		{"a query", "https://git.example.com/team-a/x.git?u=1", -1},
		{"a fragment", "https://git.example.com/team-a/x.git#frag", -1},
		{"an ssh URL", "ssh://git@git.example.com/team-a/x.git", -1},
		{"an scp-style URL", "git@git.example.com:team-a/x.git", -1},
		{"a trailing dot on the host", "https://git.example.com./team-a/x.git", -1},
		{"loopback over http on another port", "http://127.0.0.1:3001/local/r.git", -1},
		{"an OCI path sharing a prefix", "oci://registry.example.com/charts-evil", -1},
		{"the OCI registry over https is another scheme", "https://registry.example.com/charts", -1},
		{"an https host's credential is not an OCI one", "oci://git.example.com/team-a", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := matchCredential(creds, tc.url); got != tc.want {
				t.Errorf("matchCredential(%q) = %d, want %d", tc.url, got, tc.want)
			}
		})
	}
}

// The credential URL's own spellings are parsed the same way.
func TestCredentialURLSpellings(t *testing.T) {
	for _, tc := range []struct {
		cred, repo string
		match      bool
	}{
		{"https://git.example.com/team-a/", "https://git.example.com/team-a/x.git", true},
		{"https://git.example.com:443/team-a", "https://git.example.com/team-a/x.git", true},
		{"HTTPS://GIT.EXAMPLE.COM/team-a", "https://git.example.com/team-a/x.git", true},
		{"https://git.example.com/team-a", "https://git.example.com/team-a-evil/x.git", false},
		{"https://git.example.com/team-a", "https://git.example.com/team-ab.git", false},
		{"https://git.example.com/", "https://git.example.com.attacker.net/x.git", false},
		{"https://git.example.com/team-a/../team-b", "https://git.example.com/team-b/x.git", false}, // refused: no match at all
		{"https://user@git.example.com/team-a", "https://git.example.com/team-a/x.git", false},
	} {
		got := matchCredential([]RepoCredential{{URL: tc.cred}}, tc.repo) == 0
		if got != tc.match {
			t.Errorf("credential %q for %q: match = %v, want %v", tc.cred, tc.repo, got, tc.match)
		}
	}
}

// The configured credential is never sent over plain http to a host that
// is not this machine.
func TestCredentialsNeverGoOverPlainHTTP(t *testing.T) {
	c := &Cache{creds: []RepoCredential{{URL: "http://git.example.com/", UsernameFile: "/nonexistent", PasswordFile: "/nonexistent"}}}
	_, err := c.auth(context.Background(), "http://git.example.com/team/app.git")
	if err == nil || !strings.Contains(err.Error(), "over plain http") {
		t.Errorf("err = %v", err)
	}
}

// Every exact URL has its own mirror: no case folding, ".git" and slashes
// kept.
func TestMirrorKeyIsTheExactURL(t *testing.T) {
	urls := []string{
		"https://git.example.com/team-a/app2.git",
		"https://git.example.com/TEAM-A/app2.git",
		"https://git.example.com/team-a/app2",
		"https://git.example.com/team-a/app2.git/",
		"https://GIT.example.com/team-a/app2.git",
		"https://git.example.com:443/team-a/app2.git",
	}
	seen := map[string]string{}
	for _, u := range urls {
		k := mirrorKey(u)
		if prev, dup := seen[k]; dup {
			t.Errorf("%q and %q share the mirror %s", u, prev, k)
		}
		seen[k] = u
		if mirrorKey(u) != k {
			t.Errorf("mirrorKey(%q) is not stable", u)
		}
	}
}

// An error about a repository URL never repeats a password, even when the
// URL does not parse.
func TestRepoURLErrorsNeverRepeatAPassword(t *testing.T) {
	for _, u := range []string{
		"https://user:s3cret@git.example.com/r.git",
		"https://user:s3cret@git.example.com:99999/r.git",
		"https://user:s3 cret@git.example.com/r%zz.git",
		"ftp://user:s3cret@git.example.com/r.git",
	} {
		_, _, err := repoLocation(u)
		if err == nil || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "s3 cret") {
			t.Errorf("%s: err = %v", u, err)
		}
	}
}

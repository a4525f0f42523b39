package source

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/google/go-cmp/cmp"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Issue 11 item 2: a tenant who first synced …/TEAM-A/app2.git must not
// decide what the victim's …/team-a/app2.git deploys. Every exact URL has
// its own mirror.
func TestMirrorsAreKeptPerExactURL(t *testing.T) {
	srv := newGitServer(t)
	victim, victimURL := srv.repo(t, "team-a/app2")
	victim.write("app/cm.yaml", configMapYAML("victim"))
	victim.commit("victim")
	attacker, attackerURL := srv.repo(t, "TEAM-A/app2")
	attacker.write("app/cm.yaml", configMapYAML("attacker"))
	attacker.commit("attacker")
	plain, plainURL := srv.repo(t, "team-a/app3")
	plain.write("app/cm.yaml", configMapYAML("no-dot-git"))
	plain.commit("plain")

	c := &Cache{dir: t.TempDir()}
	render := func(url string) string {
		t.Helper()
		out, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: url, Path: "app"}, "")
		if err != nil {
			t.Fatalf("render %s: %v", url, err)
		}
		return names(out.Objects)[0]
	}
	if got := render(attackerURL); got != "ConfigMap/attacker" {
		t.Fatalf("attacker's repository renders %s", got)
	}
	if got := render(victimURL); got != "ConfigMap/victim" {
		t.Errorf("after the attacker's sync, the victim's URL renders %s, want ConfigMap/victim", got)
	}
	// The same repository under two spellings of its host gets two
	// mirrors too.
	render(plainURL)
	render(strings.Replace(plainURL, "127.0.0.1", "localhost", 1))
	entries, _ := os.ReadDir(filepath.Join(c.dir, "repos"))
	if len(entries) != 4 {
		t.Errorf("the cache holds %d mirrors, want 4 (one per exact URL)", len(entries))
	}
}

// A fetch goes to the URL the Application names now, never to the URL the
// mirror recorded (which an earlier spelling, or anything that wrote the
// cache, may have set).
func TestFetchGoesToTheApplicationsURL(t *testing.T) {
	srv := newGitServer(t)
	evil := newGitServer(t)
	r, url := srv.repo(t, "team-a/app")
	r.write("app/cm.yaml", configMapYAML("one"))
	r.commit("one")
	e, evilURL := evil.repo(t, "team-a/app")
	e.write("app/cm.yaml", configMapYAML("evil"))
	e.commit("evil")

	c := &Cache{dir: t.TempDir()}
	src := v1alpha1.ApplicationSource{RepoURL: url, Path: "app"}
	if _, err := c.Render(t.Context(), src, ""); err != nil {
		t.Fatal(err)
	}
	// Point the mirror's stored origin at another server.
	mirror, err := git.PlainOpen(filepath.Join(c.dir, "repos", mirrorKey(url)))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mirror.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Remotes["origin"] = &gitconfig.RemoteConfig{Name: "origin", URLs: []string{evilURL}, Fetch: cfg.Remotes["origin"].Fetch, Mirror: true}
	if err := mirror.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	r.write("app/cm.yaml", configMapYAML("two"))
	two := r.commit("two")
	evil.reset()
	out, err := c.Render(t.Context(), src, "")
	if err != nil || out.Revision != two.String() || names(out.Objects)[0] != "ConfigMap/two" {
		t.Fatalf("render = %v, %v; want the Application's repository at %s", out, err, two)
	}
	if n := len(evil.seen()); n != 0 {
		t.Errorf("the mirror's stored origin received %d requests", n)
	}
}

// Credentials configured for one repository (or path) are sent to it and
// below it only: not to a path that shares a prefix, not to another
// repository on the same server.
func TestCredentialsStayWithTheirRepository(t *testing.T) {
	srv := newGitServer(t)
	a, urlA := srv.repo(t, "team-a/app")
	a.write("app/cm.yaml", configMapYAML("a"))
	a.commit("a")
	evil, urlEvil := srv.repo(t, "team-a-evil/app")
	evil.write("app/cm.yaml", configMapYAML("evil"))
	evil.commit("evil")
	b, urlB := srv.repo(t, "team-b/app")
	b.write("app/cm.yaml", configMapYAML("b"))
	b.commit("b")

	secrets := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(secrets, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := &Cache{dir: t.TempDir(), creds: []RepoCredential{
		{URL: srv.URL + "/team-a", UsernameFile: write("user", "team-a-bot"), PasswordFile: write("pass", "s3cret")},
	}}
	for _, tc := range []struct {
		url      string
		wantUser string
	}{
		{urlA, "team-a-bot"},
		{urlEvil, ""},
		{urlB, ""},
	} {
		srv.reset()
		if _, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: tc.url, Path: "app"}, ""); err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		var users []string
		for _, r := range srv.seen() {
			users = append(users, r.user)
		}
		want := []string{}
		for range users {
			want = append(want, tc.wantUser)
		}
		if len(users) == 0 || !cmp.Equal(users, want) {
			t.Errorf("%s: the server saw the users %q, want only %q", tc.url, users, tc.wantUser)
		}
	}
}

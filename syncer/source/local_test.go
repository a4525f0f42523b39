package source

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deputy.dev/deputy/policy/v1alpha1"
)

// localFixture is deputy's cache (holding a victim's private repository, as
// a mirror would) next to a directory the operator allows for local
// repositories, where a tenant may write anything.
type localFixture struct {
	victim  *testRepo // stands for a mirror under cacheDir/repos
	cache   string
	allowed string
}

func newLocalFixture(t *testing.T) *localFixture {
	t.Helper()
	victim := newTestRepo(t)
	victim.write("app/secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: victim-secret\nstringData:\n  password: hunter2\n")
	victim.commit("victim")
	return &localFixture{victim: victim, cache: filepath.Dir(victim.dir), allowed: t.TempDir()}
}

func (f *localFixture) cacheFor(local ...string) *Cache {
	return &Cache{dir: f.cache, local: local}
}

// write creates a file under the allowed directory.
func (f *localFixture) write(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(f.allowed, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *localFixture) symlink(t *testing.T, name, target string) {
	t.Helper()
	p := filepath.Join(f.allowed, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// bareRepoPointingAt makes a bare repository under the allowed directory
// whose master branch is the victim's commit, without the victim's objects.
func (f *localFixture) bareRepoPointingAt(t *testing.T, name string) string {
	t.Helper()
	head, err := f.victim.repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	f.write(t, name+"/HEAD", "ref: refs/heads/master\n")
	f.write(t, name+"/config", "[core]\n\tbare = true\n")
	f.write(t, name+"/refs/heads/master", head.Hash().String()+"\n")
	if err := os.MkdirAll(filepath.Join(f.allowed, name, "objects", "pack"), 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(f.allowed, name)
}

func renderLocal(t *testing.T, c *Cache, repoURL string) (*Rendered, error) {
	t.Helper()
	return c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: repoURL, Path: "app"}, "")
}

// Without sync.localRepositories every spelling of a local repository is
// refused, naming the setting; relative paths are refused always.
func TestLocalRepositoriesAreOffByDefault(t *testing.T) {
	f := newLocalFixture(t)
	for _, tc := range []struct{ name, url, want string }{
		{"an absolute path", f.victim.dir, FieldLocalRepositories},
		{"a file:// URL", "file://" + f.victim.dir, FieldLocalRepositories},
		{"a file://localhost URL", "file://localhost" + f.victim.dir, FieldLocalRepositories},
		{"a FILE:// URL in capitals (schemes are case-insensitive)", "FILE://" + f.victim.dir, FieldLocalRepositories},
		{"a path with dot segments", f.victim.dir + "/../" + filepath.Base(f.victim.dir), FieldLocalRepositories},
		{"a relative ./ path", "./repo", "relative path"},
		{"a relative ../ path", "../repo", "relative path"},
		{"the working directory", ".", "relative path"},
		{"a bare name", "repo", "not supported"},
		{"a file URL naming a host", "file://evil.example.com" + f.victim.dir, "must be local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderLocal(t, f.cacheFor(), tc.url)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	t.Run("relative paths stay refused when local repositories are on", func(t *testing.T) {
		for _, u := range []string{"./x", "../x", ".", ".."} {
			if _, err := renderLocal(t, f.cacheFor("/"), u); err == nil || !strings.Contains(err.Error(), "relative path") {
				t.Errorf("%s: err = %v", u, err)
			}
		}
	})
}

// A listed directory admits the repositories under it, and only those:
// every other spelling that reaches deputy's cache is refused.
func TestLocalRepositoriesStayInTheirDirectory(t *testing.T) {
	f := newLocalFixture(t)
	own := newTestRepo(t)
	own.write("app/cm.yaml", configMapYAML("own"))
	own.commit("own")
	c := f.cacheFor(own.dir)

	t.Run("a repository under the directory renders", func(t *testing.T) {
		for _, u := range []string{own.dir, "file://" + own.dir, own.dir + "/"} {
			out, err := renderLocal(t, c, u)
			if err != nil || len(out.Objects) != 1 || out.Objects[0].GetName() != "own" {
				t.Errorf("%s: render = %v, %v", u, out, err)
			}
		}
	})
	for _, tc := range []struct{ name, url string }{
		{"a repository outside it", f.victim.dir},
		{"dot segments leaving it", own.dir + "/../" + filepath.Base(f.victim.dir)},
		{"encoded dot segments in a file URL", "file://" + own.dir + "/%2e%2e/" + filepath.Base(f.victim.dir)},
		{"a sibling sharing its name as a prefix", own.dir + "-evil"},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			out, err := renderLocal(t, c, tc.url)
			if err == nil || !strings.Contains(err.Error(), FieldLocalRepositories) {
				t.Fatalf("render = %v, %v; want an error naming %s", out, err, FieldLocalRepositories)
			}
		})
	}
}

// Every pointer a tenant can plant in a repository under an allowed
// directory (a symbolic link, a .git file, commondir, alternates) is
// resolved inside that directory: none reaches the victim's objects.
func TestLocalRepositoryPointersAreConfined(t *testing.T) {
	victimGit := func(f *localFixture) string { return filepath.Join(f.victim.dir, ".git") }
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, f *localFixture) string // returns the repoURL
		want  string
	}{
		{"a symbolic link to the victim's repository", func(t *testing.T, f *localFixture) string {
			f.symlink(t, "evil", f.victim.dir)
			return filepath.Join(f.allowed, "evil")
		}, FieldLocalRepositories},
		{"a relative symbolic link to the victim's repository", func(t *testing.T, f *localFixture) string {
			rel, _ := filepath.Rel(f.allowed, f.victim.dir)
			f.symlink(t, "evil", rel)
			return filepath.Join(f.allowed, "evil")
		}, FieldLocalRepositories},
		{"a .git that is a symbolic link to the victim's .git", func(t *testing.T, f *localFixture) string {
			f.symlink(t, "evil/.git", victimGit(f))
			return filepath.Join(f.allowed, "evil")
		}, ""},
		{"a .git file whose gitdir is the victim's (absolute)", func(t *testing.T, f *localFixture) string {
			f.write(t, "evil/.git", "gitdir: "+victimGit(f)+"\n")
			return filepath.Join(f.allowed, "evil")
		}, FieldLocalRepositories},
		{"a .git file whose gitdir climbs out (relative)", func(t *testing.T, f *localFixture) string {
			rel, _ := filepath.Rel(filepath.Join(f.allowed, "evil"), victimGit(f))
			f.write(t, "evil/.git", "gitdir: "+rel+"\n")
			return filepath.Join(f.allowed, "evil")
		}, FieldLocalRepositories},
		{"a commondir naming the victim's .git", func(t *testing.T, f *localFixture) string {
			f.write(t, "evil/.git/HEAD", "ref: refs/heads/master\n")
			f.write(t, "evil/.git/commondir", victimGit(f)+"\n")
			return filepath.Join(f.allowed, "evil")
		}, FieldLocalRepositories},
		{"an alternates file naming the victim's objects (absolute)", func(t *testing.T, f *localFixture) string {
			dir := f.bareRepoPointingAt(t, "evil.git")
			f.write(t, "evil.git/objects/info/alternates", filepath.Join(victimGit(f), "objects")+"\n")
			return dir
		}, ""},
		{"an alternates file naming the victim's objects (relative)", func(t *testing.T, f *localFixture) string {
			dir := f.bareRepoPointingAt(t, "evil.git")
			rel, _ := filepath.Rel(filepath.Join(dir, "objects"), filepath.Join(victimGit(f), "objects"))
			f.write(t, "evil.git/objects/info/alternates", rel+"\n")
			return dir
		}, ""},
		{"an objects directory that is a symbolic link to the victim's", func(t *testing.T, f *localFixture) string {
			dir := f.bareRepoPointingAt(t, "evil.git")
			if err := os.RemoveAll(filepath.Join(dir, "objects")); err != nil {
				t.Fatal(err)
			}
			f.symlink(t, "evil.git/objects", filepath.Join(victimGit(f), "objects"))
			return dir
		}, ""},
		{"a packs directory that is a symbolic link to the victim's", func(t *testing.T, f *localFixture) string {
			dir := f.bareRepoPointingAt(t, "evil.git")
			if err := os.RemoveAll(filepath.Join(dir, "objects")); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(dir, "objects"), 0o755); err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(filepath.Join(victimGit(f), "objects"))
			for _, e := range entries {
				f.symlink(t, filepath.Join("evil.git/objects", e.Name()), filepath.Join(victimGit(f), "objects", e.Name()))
			}
			return dir
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLocalFixture(t)
			url := tc.setup(t, f)
			out, err := renderLocal(t, f.cacheFor(f.allowed), url)
			if err == nil {
				t.Fatalf("render = %v: the victim's repository was read", names(out.Objects))
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the victim's content: %v", err)
			}
		})
	}

	t.Run("alternates inside the allowed directory are followed", func(t *testing.T) {
		f := newLocalFixture(t)
		// The victim's repository itself is under the allowed directory
		// here: the pointer is legitimate.
		dir := f.bareRepoPointingAt(t, "borrower.git")
		if err := os.Rename(f.victim.dir, filepath.Join(f.allowed, "shared")); err != nil {
			t.Fatal(err)
		}
		f.write(t, "borrower.git/objects/info/alternates", filepath.Join(f.allowed, "shared", ".git", "objects")+"\n")
		out, err := renderLocal(t, f.cacheFor(f.allowed), dir)
		if err != nil || len(out.Objects) != 1 || out.Objects[0].GetName() != "victim-secret" {
			t.Fatalf("render = %v, %v", out, err)
		}
	})
	t.Run("a gitdir inside the allowed directory is followed", func(t *testing.T) {
		f := newLocalFixture(t)
		own := newTestRepo(t)
		own.write("app/cm.yaml", configMapYAML("linked"))
		own.commit("own")
		// Move the repository's .git into the allowed directory and point
		// a worktree's .git file at it.
		if err := os.Rename(filepath.Join(own.dir, ".git"), filepath.Join(f.allowed, "real.git")); err != nil {
			t.Fatal(err)
		}
		f.write(t, "wt/.git", "gitdir: ../real.git\n")
		out, err := renderLocal(t, f.cacheFor(f.allowed), filepath.Join(f.allowed, "wt"))
		if err != nil || len(out.Objects) != 1 || out.Objects[0].GetName() != "linked" {
			t.Fatalf("render = %v, %v", out, err)
		}
	})
}

// New refuses a local repository directory that overlaps the cache.
func TestNewRefusesLocalRepositoriesOverTheCache(t *testing.T) {
	cache := t.TempDir()
	for _, dir := range []string{cache, filepath.Dir(cache), filepath.Join(cache, "repos"), "/", cache + "/"} {
		_, err := New(Options{CacheDir: cache, LocalRepositories: []string{dir}})
		if err == nil || !strings.Contains(err.Error(), "overlaps the cache directory") {
			t.Errorf("%s: err = %v", dir, err)
		}
	}
	if _, err := New(Options{CacheDir: cache, LocalRepositories: []string{"srv/git"}}); err == nil || !strings.Contains(err.Error(), "not an absolute directory") {
		t.Errorf("a relative directory: %v", err)
	}
	if _, err := New(Options{CacheDir: cache, LocalRepositories: []string{t.TempDir()}}); err != nil {
		t.Errorf("a directory beside the cache: %v", err)
	}
}

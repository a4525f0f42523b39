package source

import (
	"context"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
)

func names(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

// testCache is a cache whose local repositories may live anywhere under
// the system temporary directory (where the tests' repositories are).
func testCache(t *testing.T) *Cache {
	return &Cache{dir: t.TempDir(), local: []string{testTempRoot(t)}}
}

func testTempRoot(t testing.TB) string {
	t.Helper()
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return tmp
}

func TestRenderResolvesRevisions(t *testing.T) {
	r := newTestRepo(t)
	r.write("app/cm.yaml", configMapYAML("v1"))
	first := r.commit("first")
	r.tag("v1.0.0", true)
	r.tag("light", false)
	r.checkout("feature", true)
	r.write("app/cm.yaml", configMapYAML("feature"))
	feature := r.commit("on feature")
	r.checkout("master", false)
	r.write("app/cm.yaml", configMapYAML("v2"))
	head := r.commit("second")

	for _, tc := range []struct {
		name, target, override string
		want                   string
		sha                    string
	}{
		{name: "an empty targetRevision is HEAD", want: "v2", sha: head.String()},
		{name: "HEAD is the checked-out branch's tip", target: "HEAD", want: "v2", sha: head.String()},
		{name: "a branch name is its tip", target: "feature", want: "feature", sha: feature.String()},
		{name: "an annotated tag is peeled to its commit", target: "v1.0.0", want: "v1", sha: first.String()},
		{name: "a lightweight tag is its commit", target: "light", want: "v1", sha: first.String()},
		{name: "a full commit SHA", target: first.String(), want: "v1", sha: first.String()},
		{name: "an abbreviated commit SHA", target: first.String()[:10], want: "v1", sha: first.String()},
		{name: "the operation's revision overrides targetRevision", target: "feature", override: "master", want: "v2", sha: head.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "app", TargetRevision: tc.target}, tc.override)
			if err != nil {
				t.Fatal(err)
			}
			if out.Revision != tc.sha {
				t.Errorf("revision = %s, want %s", out.Revision, tc.sha)
			}
			if got := names(out.Objects); !cmp.Equal(got, []string{"ConfigMap/" + tc.want}) {
				t.Errorf("objects = %v, want ConfigMap/%s", got, tc.want)
			}
		})
	}

	t.Run("a file:// URL reads the same repository", func(t *testing.T) {
		out, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: "file://" + filepath.ToSlash(r.dir), Path: "app"}, "")
		if err != nil || out.Revision != head.String() {
			t.Fatalf("render = %v, %v", out, err)
		}
	})
	t.Run("an unknown revision is an error naming it", func(t *testing.T) {
		_, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "app", TargetRevision: "nope"}, "")
		if err == nil || !strings.Contains(err.Error(), `revision "nope" not found`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("a new commit is seen by the next render", func(t *testing.T) {
		c := testCache(t)
		r.write("app/cm.yaml", configMapYAML("v3"))
		third := r.commit("third")
		out, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "app"}, "")
		if err != nil || out.Revision != third.String() {
			t.Fatalf("render = %v, %v; want %s", out, err, third)
		}
	})
}

func TestRenderPlainFiles(t *testing.T) {
	r := newTestRepo(t)
	r.write("deploy/b.yaml", configMapYAML("b1")+"---\n# only a comment\n---\n"+configMapYAML("b2"))
	r.write("deploy/a.yml", configMapYAML("a"))
	r.write("deploy/sub/c.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`)
	r.write("deploy/sub/list.yaml", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: in-list}\n")
	r.write("deploy/README.md", "# not a manifest\n")
	r.write("deploy/.hidden/x.yaml", configMapYAML("hidden"))
	r.write("deploy/.github.yaml", configMapYAML("hidden-file"))
	r.write("deploy/nums.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: big}\nspec:\n  replicas: 3\n  progressDeadlineSeconds: 9007199254740993\n")
	r.write("other/x.yaml", configMapYAML("elsewhere"))
	r.symlink("deploy/z-link.yaml", "../other/x.yaml")
	r.commit("files")

	out, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "deploy"}, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ConfigMap/a", "ConfigMap/b1", "ConfigMap/b2", "Deployment/big", "ConfigMap/c", "ConfigMap/in-list", "ConfigMap/elsewhere"}
	if diff := cmp.Diff(want, names(out.Objects)); diff != "" {
		t.Errorf("objects in path order, every document, hidden and non-manifest files skipped (-want +got):\n%s", diff)
	}
	for _, o := range out.Objects {
		if o.GetName() == "big" {
			if v, _, _ := unstructured.NestedInt64(o.Object, "spec", "progressDeadlineSeconds"); v != 9007199254740993 {
				t.Errorf("large integer decoded as %d: integers must not go through float64", v)
			}
		}
	}

	t.Run("the repository root is the default path", func(t *testing.T) {
		out, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir}, "")
		if err != nil || len(out.Objects) != 8 {
			t.Errorf("render of the root = %v, %v; want 8 objects", names(out.Objects), err)
		}
	})
}

func TestRenderKustomize(t *testing.T) {
	r := newTestRepo(t)
	r.write("base/kustomization.yaml", "resources:\n- cm.yaml\n")
	r.write("base/cm.yaml", configMapYAML("settings"))
	r.write("overlays/prod/kustomization.yaml", "resources:\n- ../../base\nnamePrefix: prod-\nlabels:\n- pairs:\n    env: prod\n")
	r.commit("kustomize")

	out, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "overlays/prod"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(out.Objects); !cmp.Equal(got, []string{"ConfigMap/prod-settings"}) {
		t.Fatalf("objects = %v", got)
	}
	if out.Objects[0].GetLabels()["env"] != "prod" {
		t.Errorf("labels = %v", out.Objects[0].GetLabels())
	}

	t.Run("a broken kustomization is an error naming the path", func(t *testing.T) {
		r.write("broken/kustomization.yaml", "resources:\n- missing.yaml\n")
		r.commit("broken")
		_, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "broken"}, "")
		if err == nil || !strings.Contains(err.Error(), "kustomize build broken") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestRenderErrors(t *testing.T) {
	r := newTestRepo(t)
	r.write("app/cm.yaml", configMapYAML("a"))
	r.write("chart/Chart.yaml", "apiVersion: v2\nname: c\nversion: 0.1.0\n")
	r.write("bad/x.yaml", "just: a map\n")
	r.symlink("escape/link.yaml", "../../../etc/passwd")
	r.commit("errors")

	for _, tc := range []struct {
		name string
		src  v1alpha1.ApplicationSource
		want string
	}{
		{"a chart from a local path", v1alpha1.ApplicationSource{RepoURL: r.dir, Chart: "nginx"}, "of a chart source is not supported: use an https:// Helm repository or oci://HOST/PATH"},
		{"a chart over plain http to another host", v1alpha1.ApplicationSource{RepoURL: "http://charts.example.com", Chart: "nginx"}, "is plain http: deputy fetches charts over https (http only from loopback)"},
		{"a chart name with a slash", v1alpha1.ApplicationSource{RepoURL: "https://charts.example.com", Chart: "../nginx"}, `spec.source.chart "../nginx" is not a chart name`},
		{"a chart version that is no constraint", v1alpha1.ApplicationSource{RepoURL: "oci://registry.example.com/charts", Chart: "nginx", TargetRevision: "main"}, `spec.source.targetRevision "main" of chart nginx is not a chart version or semver constraint`},
		{"a chart repository with credentials in the URL", v1alpha1.ApplicationSource{RepoURL: "oci://user:secret@registry.example.com/charts", Chart: "nginx"}, "carries credentials"},
		{"helm values on a path without a chart", v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "app", Helm: &v1alpha1.HelmSource{Values: "a: 1"}}, `spec.source.helm is set but path "app" holds no Chart.yaml`},
		{"a values URL", v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "chart", Helm: &v1alpha1.HelmSource{ValueFiles: []string{"https://example.com/v.yaml"}}}, "spec.source.helm.valueFiles[0]: Invalid value: \"https://example.com/v.yaml\": URLs are not supported"},
		{"a values file that does not exist", v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "chart", Helm: &v1alpha1.HelmSource{ValueFiles: []string{"prod.yaml"}}}, "chart c (chart): spec.source.helm.valueFiles[0]: values file chart/prod.yaml does not exist"},
		{"a missing path", v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "nope"}, `path "nope" does not exist`},
		{"a path leaving the repository", v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "../x"}, "leaves the repository"},
		{"a document without kind", v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "bad"}, "bad/x.yaml: document 1 is not a Kubernetes object"},
		{"a symbolic link leaving the repository", v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "escape"}, "outside the repository"},
		{"a directory that is not a repository", v1alpha1.ApplicationSource{RepoURL: t.TempDir()}, "failed to open the Git repository"},
		{"an ssh URL", v1alpha1.ApplicationSource{RepoURL: "git@github.com:org/repo.git"}, "is not supported by deputy"},
		{"credentials in the URL", v1alpha1.ApplicationSource{RepoURL: "https://user:secret@git.example.com/r.git"}, "carries credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := testCache(t).Render(t.Context(), tc.src, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("the error repeats a password: %v", err)
			}
		})
	}
}

// An https repository is cloned once into the cache and fetched on every
// render, with the credentials configured for its URL (read from files on
// every fetch). The server is git's own smart-HTTP backend.
func TestRenderHTTPSWithCredentials(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed; the smart-HTTP test server needs git http-backend")
	}
	r := newTestRepo(t)
	r.write("app/cm.yaml", configMapYAML("one"))
	r.commit("one")

	backend := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(r.dir), "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != "deputy" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, req)
	}))
	defer srv.Close()
	url := srv.URL + "/" + filepath.Base(r.dir) + "/.git"

	secrets := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(secrets, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user, pass := write("user", "deputy\n"), write("pass", "wrong\n")
	c := &Cache{dir: t.TempDir(), creds: []RepoCredential{
		{URL: srv.URL + "/", UsernameFile: write("other-user", "x"), PasswordFile: write("other-pass", "y")},
		{URL: url, UsernameFile: user, PasswordFile: pass},
	}}
	src := v1alpha1.ApplicationSource{RepoURL: url, Path: "app"}

	if _, err := c.Render(t.Context(), src, ""); err == nil || !strings.Contains(err.Error(), "failed to clone") {
		t.Fatalf("with a wrong password: %v, want a clone error", err)
	}
	write("pass", "s3cret\n")
	out, err := c.Render(t.Context(), src, "")
	if err != nil || !cmp.Equal(names(out.Objects), []string{"ConfigMap/one"}) {
		t.Fatalf("render = %v, %v", out, err)
	}
	r.write("app/cm.yaml", configMapYAML("two"))
	two := r.commit("two")
	out, err = c.Render(t.Context(), src, "")
	if err != nil || out.Revision != two.String() || !cmp.Equal(names(out.Objects), []string{"ConfigMap/two"}) {
		t.Fatalf("after a push, render = %v, %v; want %s", out, err, two)
	}
	if _, err := git.PlainOpen(filepath.Join(c.dir, "repos")); err == nil {
		t.Errorf("the cache directory itself must not be a repository")
	}
	entries, _ := os.ReadDir(filepath.Join(c.dir, "repos"))
	if len(entries) != 1 {
		t.Errorf("cache holds %d clones, want 1", len(entries))
	}
}

func TestRepoCredentialsFromASecret(t *testing.T) {
	c := &Cache{creds: []RepoCredential{{URL: "https://git.example.com/team", Secret: &SecretRef{Namespace: "deputy", Name: "git"}}},
		secrets: func(_ context.Context, ns, name string) (map[string][]byte, error) {
			if ns == "deputy" && name == "git" {
				return map[string][]byte{"username": []byte("bot"), "password": []byte("tok")}, nil
			}
			return nil, errors.New("denied")
		}}
	auth, err := c.auth(t.Context(), "https://GIT.example.com/team/app.git")
	if err != nil || auth == nil || auth.String() != "http-basic-auth - bot:*******" {
		t.Fatalf("auth = %v, %v", auth, err)
	}
	if auth, err := c.auth(t.Context(), "https://git.example.com/other/app.git"); err != nil || auth != nil {
		t.Errorf("a URL outside the prefix got %v, %v", auth, err)
	}
	plain := &Cache{creds: []RepoCredential{{URL: "http://git.example.com/", UsernameFile: "/nonexistent", PasswordFile: "/nonexistent"}}}
	if _, err := plain.auth(t.Context(), "http://git.example.com/team/app.git"); err == nil || !strings.Contains(err.Error(), "over plain http") {
		t.Errorf("credentials over plain http to another host: %v", err)
	}
}

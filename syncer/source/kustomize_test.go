package source

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/types"

	"deputy.dev/deputy/policy/v1alpha1"
)

// countingServer answers every request with a ConfigMap and counts them.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		_, _ = w.Write([]byte(configMapYAML("remote")))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// Issue 11 item 4: with remote resources off (the default), no spelling of
// remote content in any field kustomize loads from reaches the network; the
// render fails naming the kustomization file, the field and
// sync.kustomize.remoteResources. Neither do paths that leave the
// repository.
func TestKustomizeRefusesRemoteAndEscapingReferences(t *testing.T) {
	srv, requests := countingServer(t)
	u := srv.URL + "/cm.yaml"
	for _, tc := range []struct {
		name  string
		files map[string]string
		links map[string]string
		want  []string // substrings of the error
	}{
		{"a resource URL", map[string]string{"app/kustomization.yaml": "resources:\n- " + u + "\n"}, nil,
			[]string{"app/kustomization.yaml", "resources[0]", FieldKustomizeRemoteResources}},
		{"a resource URL in capitals", map[string]string{"app/kustomization.yaml": "resources:\n- " + strings.Replace(u, "http://", "HTTP://", 1) + "\n"}, nil,
			[]string{"resources[0]", FieldKustomizeRemoteResources}},
		{"a resource URL with a git:: prefix", map[string]string{"app/kustomization.yaml": "resources:\n- git::" + u + "\n"}, nil,
			[]string{"resources[0]", FieldKustomizeRemoteResources}},
		{"a base URL (bases)", map[string]string{"app/kustomization.yaml": "bases:\n- " + srv.URL + "/org/repo//dir\n"}, nil,
			[]string{"resources[0]", FieldKustomizeRemoteResources}},
		{"a component URL", map[string]string{"app/kustomization.yaml": "components:\n- " + srv.URL + "/org/repo.git//comp\n"}, nil,
			[]string{"components[0]", FieldKustomizeRemoteResources}},
		{"a configMapGenerator file URL", map[string]string{"app/kustomization.yaml": "configMapGenerator:\n- name: c\n  files:\n  - " + u + "\n"}, nil,
			[]string{"configMapGenerator[0].files[0]", FieldKustomizeRemoteResources}},
		{"a configMapGenerator key=URL file", map[string]string{"app/kustomization.yaml": "configMapGenerator:\n- name: c\n  files:\n  - k=" + u + "\n"}, nil,
			[]string{"configMapGenerator[0].files[0]", FieldKustomizeRemoteResources}},
		{"a configMapGenerator envs URL", map[string]string{"app/kustomization.yaml": "configMapGenerator:\n- name: c\n  envs:\n  - " + u + "\n"}, nil,
			[]string{"configMapGenerator[0].envs[0]", FieldKustomizeRemoteResources}},
		{"a configMapGenerator env URL", map[string]string{"app/kustomization.yaml": "configMapGenerator:\n- name: c\n  env: " + u + "\n"}, nil,
			[]string{"configMapGenerator[0].envs[0]", FieldKustomizeRemoteResources}},
		{"a secretGenerator file URL", map[string]string{"app/kustomization.yaml": "secretGenerator:\n- name: s\n  files:\n  - " + u + "\n"}, nil,
			[]string{"secretGenerator[0].files[0]", FieldKustomizeRemoteResources}},
		{"a transformer file whose PatchTransformer path is a URL", map[string]string{
			"app/kustomization.yaml": "resources:\n- cm.yaml\ntransformers:\n- t.yaml\n", "app/cm.yaml": configMapYAML("local"),
			"app/t.yaml": "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: " + u + "\ntarget: {kind: ConfigMap}\n"}, nil,
			[]string{"app/t.yaml", "path", FieldKustomizeRemoteResources}},
		{"an inline transformer whose path is a URL", map[string]string{
			"app/kustomization.yaml": "resources:\n- cm.yaml\ntransformers:\n- |-\n  apiVersion: builtin\n  kind: PatchStrategicMergeTransformer\n  metadata: {name: p}\n  paths:\n  - " + u + "\n",
			"app/cm.yaml":            configMapYAML("local")}, nil,
			[]string{"transformers[0]", "paths[0]", FieldKustomizeRemoteResources}},
		{"a generator file whose files are URLs", map[string]string{
			"app/kustomization.yaml": "generators:\n- g.yaml\n",
			"app/g.yaml":             "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: g}\nfiles:\n- " + u + "\n"}, nil,
			[]string{"app/g.yaml", "files", FieldKustomizeRemoteResources}},
		{"a transformers directory whose configuration names a URL", map[string]string{
			"app/kustomization.yaml": "resources:\n- cm.yaml\ntransformers:\n- tdir\n", "app/cm.yaml": configMapYAML("local"),
			"app/tdir/kustomization.yaml": "resources:\n- t.yaml\n",
			"app/tdir/t.yaml":             "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: " + u + "\n"}, nil,
			[]string{"app/tdir/t.yaml", FieldKustomizeRemoteResources}},
		{"a validator URL", map[string]string{"app/kustomization.yaml": "validators:\n- " + u + "\n"}, nil,
			[]string{"validators[0]", FieldKustomizeRemoteResources}},
		{"a patch path URL", map[string]string{"app/kustomization.yaml": "resources:\n- cm.yaml\npatches:\n- path: " + u + "\n", "app/cm.yaml": configMapYAML("local")}, nil,
			[]string{"patches[0].path", FieldKustomizeRemoteResources}},
		{"a patchesStrategicMerge URL", map[string]string{"app/kustomization.yaml": "resources:\n- cm.yaml\npatchesStrategicMerge:\n- " + u + "\n", "app/cm.yaml": configMapYAML("local")}, nil,
			[]string{"patchesStrategicMerge[0]", FieldKustomizeRemoteResources}},
		{"a patchesJson6902 path URL", map[string]string{"app/kustomization.yaml": "resources:\n- cm.yaml\npatchesJson6902:\n- path: " + u + "\n  target: {version: v1, kind: ConfigMap, name: local}\n", "app/cm.yaml": configMapYAML("local")}, nil,
			[]string{"patchesJson6902[0].path", FieldKustomizeRemoteResources}},
		{"a replacements path URL", map[string]string{"app/kustomization.yaml": "resources:\n- cm.yaml\nreplacements:\n- path: " + u + "\n", "app/cm.yaml": configMapYAML("local")}, nil,
			[]string{"replacements[0].path", FieldKustomizeRemoteResources}},
		{"an openapi path URL", map[string]string{"app/kustomization.yaml": "resources:\n- cm.yaml\nopenapi:\n  path: " + u + "\n", "app/cm.yaml": configMapYAML("local")}, nil,
			[]string{"openapi.path", FieldKustomizeRemoteResources}},
		{"a crds URL", map[string]string{"app/kustomization.yaml": "crds:\n- " + u + "\n"}, nil,
			[]string{"crds[0]", FieldKustomizeRemoteResources}},
		{"a configurations URL", map[string]string{"app/kustomization.yaml": "configurations:\n- " + u + "\n"}, nil,
			[]string{"configurations[0]", FieldKustomizeRemoteResources}},
		{"a remote reference in a base", map[string]string{
			"app/kustomization.yaml":  "resources:\n- ../base\n",
			"base/kustomization.yaml": "resources:\n- " + u + "\n"}, nil,
			[]string{"base/kustomization.yaml", "resources[0]", FieldKustomizeRemoteResources}},
		{"github.com/org/repo", map[string]string{"app/kustomization.yaml": "resources:\n- github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v3.3.1\n"}, nil,
			[]string{"resources[0]", FieldKustomizeRemoteResources}},
		{"github.com/org/repo even where a local directory has that name", map[string]string{
			"app/kustomization.yaml":                "resources:\n- github.com/x/y\n",
			"app/github.com/x/y/kustomization.yaml": "resources: []\n"}, nil,
			[]string{"resources[0]", FieldKustomizeRemoteResources}},
		{"an scp-style Git URL", map[string]string{"app/kustomization.yaml": "resources:\n- git@github.com:org/repo//dir\n"}, nil,
			[]string{"resources[0]", FieldKustomizeRemoteResources}},
		{"an ssh URL", map[string]string{"app/kustomization.yaml": "resources:\n- ssh://git@git.example.com/org/repo.git\n"}, nil,
			[]string{"resources[0]", FieldKustomizeRemoteResources}},
		{"a file URL", map[string]string{"app/kustomization.yaml": "resources:\n- file:///etc\n"}, nil,
			[]string{"resources[0]", FieldKustomizeRemoteResources}},
		{"a file URL to deputy's cache", map[string]string{"app/kustomization.yaml": "resources:\n- file:///var/cache/deputy/repos/0123//app\n"}, nil,
			[]string{"resources[0]", FieldKustomizeRemoteResources}},
		{"dot segments leaving the repository", map[string]string{"app/kustomization.yaml": "resources:\n- ../../..\n"}, nil,
			[]string{"resources[0]", "leaves the repository", FieldKustomizeRemoteResources}},
		{"dot segments leaving the repository from a generator", map[string]string{"app/kustomization.yaml": "configMapGenerator:\n- name: c\n  files:\n  - ../../../etc/passwd\n"}, nil,
			[]string{"configMapGenerator[0].files[0]", "leaves the repository"}},
		{"an absolute path", map[string]string{"app/kustomization.yaml": "resources:\n- /etc/passwd\n"}, nil,
			[]string{"resources[0]", "absolute path", FieldKustomizeRemoteResources}},
		{"a symbolic link leaving the repository", map[string]string{"app/kustomization.yaml": "resources:\n- link.yaml\n"},
			map[string]string{"app/link.yaml": "../../../etc/passwd"},
			[]string{"resources[0]", "outside the repository"}},
		{"a symbolic link to an absolute path", map[string]string{"app/kustomization.yaml": "configMapGenerator:\n- name: c\n  files:\n  - link\n"},
			map[string]string{"app/link": "/etc/passwd"},
			[]string{"configMapGenerator[0].files[0]", "absolute path"}},
		{"a directory link leaving the repository", map[string]string{"app/kustomization.yaml": "resources:\n- base\n"},
			map[string]string{"app/base": "../../.."},
			[]string{"resources[0]", "outside the repository"}},
		{"a Helm chart", map[string]string{"app/kustomization.yaml": "helmCharts:\n- name: x\n  repo: " + srv.URL + "\n"}, nil,
			[]string{"helmCharts", "Helm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRepo(t)
			for name, content := range tc.files {
				r.write(name, content)
			}
			for name, target := range tc.links {
				r.symlink(name, target)
			}
			r.commit("kustomize")
			out, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "app"}, "")
			if err == nil {
				t.Fatalf("render = %v, want an error", names(out.Objects))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %q", err, w)
				}
			}
			if n := requests.Load(); n != 0 {
				t.Fatalf("the remote server received %d requests", n)
			}
		})
	}
}

// What the walk must not refuse: local files and directories, links inside
// the repository, inline patches and plugin configurations whose "path" is
// a field path.
func TestKustomizeLocalReferencesStillBuild(t *testing.T) {
	r := newTestRepo(t)
	r.write("base/kustomization.yaml", "resources:\n- cm.yaml\n")
	r.write("base/cm.yaml", configMapYAML("settings"))
	r.write("app/kustomization.yaml", `resources:
- ../linked-base
- extra.yaml
configMapGenerator:
- name: gen
  files:
  - key=data.txt
  envs:
  - vars.env
patchesStrategicMerge:
- |-
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: settings}
  data: {inline: "yes"}
patches:
- path: patch.yaml
transformers:
- labels.yaml
generatorOptions: {disableNameSuffixHash: true}
`)
	r.write("app/data.txt", "hello\n")
	r.write("app/vars.env", "A=1\n")
	r.write("app/patch.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {patched: \"yes\"}\n")
	r.write("app/labels.yaml", "apiVersion: builtin\nkind: LabelTransformer\nmetadata: {name: l}\nlabels: {team: a}\nfieldSpecs:\n- path: metadata/labels\n  create: true\n")
	r.write("shared/extra.yaml", configMapYAML("extra"))
	r.symlink("linked-base", "base")
	r.symlink("app/extra.yaml", "../shared/extra.yaml")
	r.commit("kustomize")

	out, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "app"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ConfigMap/settings", "ConfigMap/extra", "ConfigMap/gen"}, names(out.Objects)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	for _, o := range out.Objects {
		if o.GetLabels()["team"] != "a" {
			t.Errorf("%s has labels %v: the LabelTransformer did not run", o.GetName(), o.GetLabels())
		}
		if o.GetName() == "settings" {
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			if data["inline"] != "yes" || data["patched"] != "yes" {
				t.Errorf("settings data = %v: a patch did not apply", data)
			}
		}
	}
}

// Exec and KRM function plugins and Helm stay off.
func TestKustomizeOptionsKeepPluginsOff(t *testing.T) {
	o := kustomizeOptions()
	if o.PluginConfig.PluginRestrictions != types.PluginRestrictionsBuiltinsOnly {
		t.Errorf("plugin restrictions = %v, want builtins only", o.PluginConfig.PluginRestrictions)
	}
	if o.PluginConfig.HelmConfig.Enabled {
		t.Error("Helm is enabled")
	}
	if o.LoadRestrictions != types.LoadRestrictionsRootOnly {
		t.Errorf("load restrictions = %v", o.LoadRestrictions)
	}
	r := newTestRepo(t)
	r.write("app/kustomization.yaml", "resources:\n- cm.yaml\ntransformers:\n- fn.yaml\n")
	r.write("app/cm.yaml", configMapYAML("x"))
	r.write("app/fn.yaml", "apiVersion: example.com/v1\nkind: Evil\nmetadata:\n  name: e\n  annotations:\n    config.kubernetes.io/function: |\n      exec:\n        path: /bin/sh\n")
	r.commit("plugin")
	if _, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "app"}, ""); err == nil {
		t.Error("an exec function plugin was accepted")
	}
}

// With remote resources on, http(s) content loads, within the per-request
// timeout and the per-file byte limit; the other remote forms stay refused.
func TestKustomizeRemoteResourcesWhenAllowed(t *testing.T) {
	srv, requests := countingServer(t)
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  k: \""))
		chunk := []byte(strings.Repeat("x", 4096))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(endless.Close)
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hang.Close)

	c := testCache(t)
	// The render worker bounds each remote response by maxFileBytes.
	c.kustomize = KustomizeOptions{RemoteResources: true, RemoteTimeout: 2 * time.Second}
	c.limits.MaxFileBytes = 64 << 10
	render := func(kustomization string) ([]string, error) {
		r := newTestRepo(t)
		r.write("app/kustomization.yaml", kustomization)
		r.commit("remote")
		out, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "app"}, "")
		if err != nil {
			return nil, err
		}
		return names(out.Objects), nil
	}
	if got, err := render("resources:\n- " + srv.URL + "/cm.yaml\n"); err != nil || !cmp.Equal(got, []string{"ConfigMap/remote"}) || requests.Load() != 1 {
		t.Fatalf("an http resource: %v, %v (%d requests)", got, err, requests.Load())
	}
	start := time.Now()
	if _, err := render("resources:\n- " + endless.URL + "/big.yaml\n"); err == nil || !strings.Contains(err.Error(), FieldMaxFileBytes) {
		t.Errorf("a never-ending body: %v, want an error naming %s", err, FieldMaxFileBytes)
	}
	if _, err := render("resources:\n- " + hang.URL + "/slow.yaml\n"); err == nil || !strings.Contains(err.Error(), "sync.kustomize.remoteTimeout") {
		t.Errorf("a server that never answers: %v, want an error naming sync.kustomize.remoteTimeout", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the bounded loads took %s", d)
	}
	t.Run("a Git base over http is cloned and read within the render's limits", func(t *testing.T) {
		if _, err := exec.LookPath("git"); err != nil {
			t.Skip("needs git")
		}
		gs := newGitServer(t)
		base, baseURL := gs.repo(t, "base")
		base.write("app/kustomization.yaml", "resources:\n- cm.yaml\n")
		base.write("app/cm.yaml", configMapYAML("from-a-git-base"))
		base.commit("base")
		got, err := render("resources:\n- " + baseURL + "//app?ref=master&submodules=false\n")
		if err != nil || !cmp.Equal(got, []string{"ConfigMap/from-a-git-base"}) {
			t.Fatalf("a Git base: %v, %v", got, err)
		}
	})
	for _, ref := range []string{"file:///etc", "ssh://git@git.example.com/org/repo.git", "git@github.com:org/repo"} {
		if _, err := render("resources:\n- " + ref + "\n"); err == nil || !strings.Contains(err.Error(), "not an http(s) reference") {
			t.Errorf("%s: %v", ref, err)
		}
	}
}

// With remote resources off, the process-wide backstop refuses what
// kustomize's loader would send through Go's default transport, should a
// reference slip past the walk, and git may use no protocol.
func TestKustomizeRemoteBackstopRefusesDefaultTransport(t *testing.T) {
	prev := remoteSettings.Load()
	t.Cleanup(func() {
		if prev != nil {
			configureKustomizeRemote(prev.enabled, prev.timeout, prev.maxBytes)
		}
	})
	configureKustomizeRemote(false, time.Second, 1<<20)
	srv, requests := countingServer(t)
	resp, err := (&http.Client{}).Get(srv.URL + "/secret.yaml") // what kustomize's loader does
	if err == nil {
		resp.Body.Close()
		t.Fatal("the default transport sent a request with remote resources off")
	}
	if !strings.Contains(err.Error(), FieldKustomizeRemoteResources) {
		t.Errorf("err = %v, want it to name %s", err, FieldKustomizeRemoteResources)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the server saw %d requests", n)
	}
	if got := os.Getenv("GIT_ALLOW_PROTOCOL"); got != gitNoProtocol {
		t.Errorf("GIT_ALLOW_PROTOCOL = %q, want %q", got, gitNoProtocol)
	}
}

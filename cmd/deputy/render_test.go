package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/source"
)

// deputy render runs the render worker as deputy's main does: this test
// binary is one too, selected first thing.
func init() {
	if source.IsRenderWorker() {
		os.Exit(source.RenderWorkerMain())
	}
}

// renderRepo commits files to a new Git repository dir and returns the
// commit SHA.
func renderRepo(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	repo, err := git.PlainOpen(dir)
	if err != nil {
		if repo, err = git.PlainInit(dir, false); err != nil {
			t.Fatal(err)
		}
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := wt.Add(name); err != nil {
			t.Fatal(err)
		}
	}
	h, err := wt.Commit("files", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@example.com", When: time.Unix(1700000000, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// decodeDocs decodes deputy render's YAML output.
func decodeDocs(t *testing.T, out string) []map[string]any {
	t.Helper()
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []map[string]any
	for {
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			break
		}
		if m != nil {
			objs = append(objs, m)
		}
	}
	return objs
}

// deputy render prints what the sync engine renders (source.RenderApplication,
// the function a sync applies): plain manifests, a kustomization, a chart in
// Git, and a chart whose values come from a second repository ($values).
func TestRenderCommandPrintsWhatTheEngineRenders(t *testing.T) {
	root := t.TempDir()
	apps, values := filepath.Join(root, "apps"), filepath.Join(root, "values")
	renderRepo(t, apps, map[string]string{
		"plain/cm.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {k: v}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: plain-sa}\n",
		"kust/kustomization.yaml":   "namePrefix: k-\nresources: [cm.yaml]\n",
		"kust/cm.yaml":              "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n",
		"chart/Chart.yaml":          "apiVersion: v2\nname: web\nversion: 0.1.0\n",
		"chart/values.yaml":         "sa: chart-default\n",
		"chart/templates/sa.yaml":   "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: {{ .Values.sa }}, namespace: {{ .Release.Namespace }}, labels: {release: {{ .Release.Name }}}}\n",
		"chart/templates/caps.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: caps}\ndata: {kube: {{ .Capabilities.KubeVersion.Version | quote }}}\n",
	})
	renderRepo(t, values, map[string]string{"web/prod.yaml": "sa: from-values\n"})
	app := func(spec string) string {
		p := filepath.Join(t.TempDir(), "app.yaml")
		body := "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: guestbook, namespace: argocd}\nspec:\n  project: default\n  destination: {server: https://kubernetes.default.svc, namespace: web}\n" + spec
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, spec string
		extra      []string
		want       []string // kind/name in order
	}{
		{"plain manifests", "  source: {repoURL: " + apps + ", path: plain}\n", nil, []string{"ConfigMap/plain", "ServiceAccount/plain-sa"}},
		{"a kustomization", "  source: {repoURL: " + apps + ", path: kust}\n", nil, []string{"ConfigMap/k-cm"}},
		{"a chart in Git, with the engine's release defaults", "  source: {repoURL: " + apps + ", path: chart}\n", nil, []string{"ServiceAccount/chart-default", "ConfigMap/caps"}},
		{"a chart with --kube-version", "  source: {repoURL: " + apps + ", path: chart}\n", []string{"--kube-version", "1.31.4"}, []string{"ServiceAccount/chart-default", "ConfigMap/caps"}},
		{"a chart with $values from a second repository, plus plain manifests", "  sources:\n  - {repoURL: " + apps + ", path: chart, helm: {valueFiles: [$values/web/prod.yaml]}}\n  - {repoURL: " + values + ", ref: values}\n  - {repoURL: " + apps + ", path: plain}\n",
			nil, []string{"ServiceAccount/from-values", "ConfigMap/caps", "ConfigMap/plain", "ServiceAccount/plain-sa"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := app(tc.spec)
			var out, errb bytes.Buffer
			args := append([]string{"render", "-f", file, "--local-repos", root}, tc.extra...)
			if code := execute(t.Context(), args, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			got := decodeDocs(t, out.String())
			var names []string
			for _, o := range got {
				names = append(names, o["kind"].(string)+"/"+o["metadata"].(map[string]any)["name"].(string))
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Fatalf("objects (-want +got):\n%s\n%s", diff, out.String())
			}
			// The engine's own render of the same Application.
			a, err := readApplicationFile(file)
			if err != nil {
				t.Fatal(err)
			}
			cache, err := source.New(source.Options{CacheDir: t.TempDir(), LocalRepositories: []string{root}})
			if err != nil {
				t.Fatal(err)
			}
			r, err := source.RenderApplication(t.Context(), cache, withCapabilities(a, flagValue(tc.extra, "--kube-version"), nil), v1alpha1.SyncOperation{})
			if err != nil {
				t.Fatal(err)
			}
			var want []map[string]any
			for _, o := range r.Objects {
				want = append(want, o.Object)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("deputy render differs from the engine's render (-engine +render):\n%s", diff)
			}
			if tc.name == "a chart with --kube-version" && got[1]["data"].(map[string]any)["kube"] != "v1.31.4" {
				t.Errorf("--kube-version did not reach .Capabilities: %v", got[1]["data"])
			}
		})
	}

	t.Run("-o json prints a v1 List of the same objects", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := execute(t.Context(), []string{"render", "-f", app("  source: {repoURL: " + apps + ", path: plain}\n"), "--local-repos", root, "-o", "json"}, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		var list unstructured.UnstructuredList
		if err := json.Unmarshal(out.Bytes(), &list.Object); err != nil {
			t.Fatal(err)
		}
		if list.Object["kind"] != "List" || len(list.Object["items"].([]any)) != 2 {
			t.Errorf("output %s", out.String())
		}
	})
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// deputy render fails with the engine's error, naming the field and the
// fix, and exits 1.
func TestRenderCommandErrors(t *testing.T) {
	root := t.TempDir()
	apps := filepath.Join(root, "apps")
	renderRepo(t, apps, map[string]string{"plain/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\n"})
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "app.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	head := "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: a, namespace: n}\nspec:\n  project: p\n  destination: {server: https://x, namespace: n}\n"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a local repository outside --local-repos is refused", []string{"-f", write(head + "  source: {repoURL: " + apps + ", path: plain}\n")}, "sync.localRepositories"},
		{"an unknown $ref names the refs", []string{"-f", write(head + "  sources:\n  - {repoURL: " + apps + ", path: plain, helm: {valueFiles: [$nope/v.yaml]}}\n  - {repoURL: " + apps + ", ref: values}\n"), "--local-repos", root},
			`spec.sources[0].helm.valueFiles[0]: Invalid value: "$nope/v.yaml": no source of spec.sources has ref "nope" (refs: values)`},
		{"--revision once per source for spec.sources", []string{"-f", write(head + "  sources:\n  - {repoURL: " + apps + ", path: plain}\n  - {repoURL: " + apps + ", ref: values}\n"), "--local-repos", root, "--revision", "HEAD"},
			"operation.sync.revisions has 1 revisions, but this Application has 2 sources"},
		{"not an Application", []string{"-f", write("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")}, "holds v1 ConfigMap: give one Application"},
		{"an argoproj.io Application with Argo CD's kustomize overrides is refused, not rendered without them", []string{"-f", write(strings.Replace(head, "deputy.dev", "argoproj.io", 1) + "  source: {repoURL: " + apps + ", path: plain, kustomize: {namePrefix: pre-}}\n")},
			"spec.source.kustomize (Argo CD's) is not supported by deputy"},
		{"two Applications in one file are refused, not the second dropped", []string{"-f", write("---\n" + head + "  source: {repoURL: " + apps + ", path: plain}\n---\n" + head + "  source: {repoURL: " + apps + ", path: other}\n---\n")},
			"holds 2 YAML documents: give one Application"},
		{"an unknown field of a deputy Application", []string{"-f", write(head + "  source: {repoURL: " + apps + ", pth: plain}\n")}, `unknown field "pth"`},
		{"NS/NAME needs --kubeconfig", []string{"argocd/guestbook"}, "needs --kubeconfig"},
		{"a bad output format", []string{"-f", write(head + "  source: {repoURL: " + apps + ", path: plain}\n"), "-o", "toml"}, "-o toml: use yaml or json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := execute(t.Context(), append([]string{"render"}, tc.args...), &out, &errb); code != 1 || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, errb.String(), tc.want)
			}
		})
	}
}

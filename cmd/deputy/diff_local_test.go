package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeFiles writes files (relative path → content) under a new directory.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ids are "Kind/name" of objs, in order.
func ids(objs []map[string]any) []string {
	var out []string
	for _, o := range objs {
		md, _ := o["metadata"].(map[string]any)
		out = append(out, fmt.Sprintf("%s/%s", o["kind"], md["name"]))
	}
	return out
}

func noWarnings(t *testing.T) func(string) {
	return func(w string) { t.Errorf("unexpected warning %q", w) }
}

func TestReadLocalPlainDirectory(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {big: \"1\"}\nbinaryData: {}\n---\n---\n" +
			"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Service, metadata: {name: s1}}\n- {apiVersion: v1, kind: Service, metadata: {name: s2}}\n",
		"sub/b.json":     `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":9007199254740993}}`,
		"c.YML":          "apiVersion: v1\nkind: Secret\nmetadata: {name: c}\n",
		".hidden/x.yaml": "not: [valid",
		".x.yaml":        "not: [valid",
		"README.md":      "# not a manifest",
	})
	objs, err := readLocal(dir, noWarnings(t))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"ConfigMap/a", "Service/s1", "Service/s2", "Secret/c", "Deployment/web"}, ids(objs)); d != "" {
		t.Errorf("objects (-want +got):\n%s", d)
	}
	if got := objs[4]["spec"].(map[string]any)["replicas"]; got != int64(9007199254740993) {
		t.Errorf("an integer lost precision: %v (%T)", got, got)
	}
}

func TestReadLocalKustomization(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"base/kustomization.yaml":    "resources: [cm.yaml]\n",
		"base/cm.yaml":               "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {color: red}\n",
		"overlay/kustomization.yaml": "resources: [../base]\nnamePrefix: dev-\npatches:\n- path: color.yaml\n",
		"overlay/color.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {color: blue}\n",
	})
	objs, err := readLocal(filepath.Join(dir, "overlay"), noWarnings(t))
	// The overlay's base is outside --local: refused.
	if err == nil || !strings.Contains(err.Error(), `resources entry "../base" is not a file or directory inside the directory`) {
		t.Fatalf("overlay outside DIR: %v, %v", objs, err)
	}
	root := writeFiles(t, map[string]string{
		"kustomization.yaml":         "resources: [overlay]\n",
		"base/kustomization.yaml":    "resources: [cm.yaml]\n",
		"base/cm.yaml":               "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {color: red}\n",
		"overlay/kustomization.yaml": "resources: [../base]\nnamePrefix: dev-\npatches:\n- path: color.yaml\n",
		"overlay/color.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata: {color: blue}\n",
	})
	objs, err = readLocal(root, noWarnings(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || ids(objs)[0] != "ConfigMap/dev-config" || objs[0]["data"].(map[string]any)["color"] != "blue" {
		t.Errorf("objects %v", objs)
	}
}

func TestReadLocalRefusesRemoteKustomizeContent(t *testing.T) {
	for name, k := range map[string]string{
		"a remote base":        "resources: [\"https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v1.0.6\"]\n",
		"a Git base":           "resources: [\"github.com/kubernetes-sigs/kustomize/examples/helloWorld?ref=v1.0.6\"]\n",
		"an scp-like Git base": "resources: [\"git@github.com:org/repo.git//base\"]\n",
		"a remote patch":       "resources: [cm.yaml]\npatches:\n- path: https://example.com/patch.yaml\n",
		"a remote generator":   "configMapGenerator:\n- name: x\n  files: [\"https://example.com/f\"]\n",
		"an absolute path":     "resources: [/etc/passwd]\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{"kustomization.yaml": k,
				"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\n"})
			_, err := readLocal(dir, noWarnings(t))
			if err == nil || !strings.Contains(err.Error(), "--local loads no remote") {
				t.Errorf("err = %v", err)
			}
		})
	}
}

func TestReadLocalRefusals(t *testing.T) {
	big := strings.Repeat("#", maxLocalBytes+1)
	var many strings.Builder
	many.WriteString(`{"apiVersion":"v1","kind":"List","items":[`)
	for i := range maxLocalObjects + 1 {
		if i > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c%d"}}`, i)
	}
	many.WriteString("]}")
	outside := writeFiles(t, map[string]string{"secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"})
	linked := writeFiles(t, map[string]string{})
	if err := os.Symlink(filepath.Join(outside, "secret.yaml"), filepath.Join(linked, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dir  string
		want string
	}{
		{"a chart", writeFiles(t, map[string]string{"Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n"}), "--local does not render Helm charts: run helm template and point --local at its output"},
		{"too many bytes", writeFiles(t, map[string]string{"a.yaml": big}), "--local reads at most 8 MiB"},
		{"too many objects", writeFiles(t, map[string]string{"a.json": many.String()}), "more than 10000 objects (at a.json): --local reads at most 10000"},
		{"nothing", writeFiles(t, map[string]string{"README.md": "x"}), "holds no manifests"},
		{"not a directory", filepath.Join(writeFiles(t, map[string]string{"a.yaml": "x"}), "a.yaml"), "is not a directory"},
		{"missing", filepath.Join(t.TempDir(), "nope"), "no such file or directory"},
		{"not an object", writeFiles(t, map[string]string{"a.yaml": "- a\n- b\n"}), "a.yaml: document 1 is not a Kubernetes object"},
		{"no name", writeFiles(t, map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n"}), "a ConfigMap (apiVersion v1) has no metadata.name"},
		{"a link out of the directory", linked, "link.yaml is a symbolic link out of the directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readLocal(tc.dir, noWarnings(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestReadLocalSkipsGenerateNameHooks(t *testing.T) {
	dir := writeFiles(t, map[string]string{"a.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: migrate-, annotations: {argocd.argoproj.io/hook: PreSync}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"})
	var warnings []string
	objs, err := readLocal(dir, func(w string) { warnings = append(warnings, w) })
	if err != nil || len(objs) != 1 || len(warnings) != 1 || !strings.Contains(warnings[0], `Job with generateName "migrate-" skipped`) {
		t.Errorf("%v %v %v", objs, warnings, err)
	}
}

func TestDiffLocalSendsTheManifests(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	dir := writeFiles(t, map[string]string{"web.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 3}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\n"})
	code, out, errOut := runCLI(t, "diff", "guestbook/guestbook", "--local", dir, "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 1 || !strings.Contains(out, "===== apps/Deployment guestbook/web (update)") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	reqs := s.differ.requests()
	if len(reqs) != 1 || len(reqs[0].Objects) != 2 || reqs[0].Sync.Revision != "" {
		t.Fatalf("requests %+v", reqs)
	}
	if o := reqs[0].Objects[0]; o.GetKind() != "Deployment" || o.GetName() != "web" || o.Object["spec"].(map[string]any)["replicas"] != int64(3) {
		t.Errorf("object 0 %#v", o.Object)
	}
	// Nothing to change is 0, as without --local.
	if code, out, errOut := runCLI(t, "diff", "guestbook/flaky", "--local", dir, "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken)); code != 0 {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
}

func TestDiffLocalErrorsExit2(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	dir := writeFiles(t, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\n"})
	chart := writeFiles(t, map[string]string{"Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n"})
	alice, bob := writeToken(t, syncAliceToken), writeToken(t, syncBobToken)
	for _, tc := range []struct {
		name string
		args []string
		err  []string
	}{
		{"with --revision", []string{"guestbook/guestbook", "--local", dir, "--revision", "v2", "--token-file", alice}, []string{"--local and --revision do not go together"}},
		{"a chart", []string{"guestbook/guestbook", "--local", chart, "--token-file", alice}, []string{"--local does not render Helm charts"}},
		{"forbidden: names create", []string{"guestbook/guestbook", "--local", dir, "--token-file", bob},
			[]string{`User "bob" cannot create resource "applications/diff"`, "grant verb create on applications/diff, group deputy.dev"}},
		{"an unknown Application", []string{"guestbook/nope", "--local", dir, "--token-file", alice}, []string{`applications.deputy.dev "nope" not found`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"diff", "--server", s.url, "--cacert", s.caFile}, tc.args...)...)
			if code != 2 {
				t.Fatalf("exit %d, want 2\n%s%s", code, out, errOut)
			}
			for _, w := range tc.err {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
	if n := len(s.differ.requests()); n != 0 {
		t.Errorf("%d diffs ran", n)
	}
}

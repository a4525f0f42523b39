package e2e

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/source"
	"deputy.dev/deputy/test/framework"
)

// deputy render NS/NAME reads the Application from the real apiserver, as an
// identity that may only get Applications, and prints what the sync
// engine renders for it: here a chart with $values from a second
// repository.
func TestRenderCommandReadsTheApplicationFromTheCluster(t *testing.T) {
	const ns, reader = "sources-render", "render-reader"
	ensureNamespace(t, ns)
	token := serviceAccountToken(t, ns, reader)
	role(t, ns, "e2e-render-reader", ns, reader, rule("deputy.dev", []string{"applications"}, "get"))
	kubeconfig := filepath.Join(t.TempDir(), "reader.kubeconfig")
	if err := cp.WriteTokenKubeconfig(kubeconfig, token); err != nil {
		t.Fatal(err)
	}
	charts, values := newGitRepo(t), newGitRepo(t)
	for name, content := range sourcesChart {
		charts.write(name, content)
	}
	charts.commit("chart")
	values.write("web/values.yaml", "greeting: rendered from the cluster's Application\nextra: true\n")
	values.commit("values")
	app := multiSourceApp("render-demo", "p", charts.dir, values.dir, ns)
	app.Namespace = ns
	app.TypeMeta = metav1.TypeMeta{APIVersion: "deputy.dev/v1alpha1", Kind: "Application"}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(app)
	if err != nil {
		t.Fatal(err)
	}
	delete(obj, "status")
	if _, err := dynamic.NewForConfigOrDie(cp.Admin).Resource(applicationsGVR).Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the Application: %v", err)
	}

	bin, err := framework.DeputyBinary()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, "render", ns+"/render-demo", "--kubeconfig", kubeconfig, "--local-repos", repoRoot)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("deputy render: %v: %s", err, errb.String())
	}
	var got []map[string]any
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out.String()), 4096)
	for {
		var m map[string]any
		if d.Decode(&m) != nil {
			break
		}
		if m != nil {
			got = append(got, m)
		}
	}
	cache, err := source.New(source.Options{CacheDir: t.TempDir(), LocalRepositories: []string{repoRoot}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := source.RenderApplication(t.Context(), cache, app, v1alpha1.SyncOperation{})
	if err != nil {
		t.Fatal(err)
	}
	var want []map[string]any
	for _, o := range r.Objects {
		want = append(want, o.Object)
	}
	if len(want) != 2 {
		t.Fatalf("the engine rendered %d objects, want the chart's two", len(want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deputy render differs from the engine's render (-engine +render):\n%s", diff)
	}

	t.Run("an Application the identity may not read fails with the apiserver's error", func(t *testing.T) {
		cmd := exec.CommandContext(t.Context(), bin, "render", "argocd/render-demo", "--kubeconfig", kubeconfig)
		b, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(b), "failed to read Application argocd/render-demo") || !strings.Contains(string(b), "forbidden") {
			t.Errorf("deputy render = %v: %s", err, b)
		}
	})
}

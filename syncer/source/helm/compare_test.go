package helm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"deputy.dev/deputy/policy/v1alpha1"
)

// helmBin is the real helm v3.22.0 (make test-binaries builds it into
// bin/ from the test module, HELM_BIN names it).
func helmBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("HELM_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "..", "bin", "helm")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no helm binary at %s: run make test-binaries (or set HELM_BIN)", bin)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// helmArgs are the `helm template` arguments Argo CD passes for h (chart
// directory testdata/CHART, paths relative to testdata).
func helmArgs(chart string, h *v1alpha1.HelmSource) []string {
	args := []string{"template", h.ReleaseName, chart, "--namespace", h.Namespace}
	if !h.SkipCrds {
		args = append(args, "--include-crds")
	}
	if h.SkipSchemaValidation {
		args = append(args, "--skip-schema-validation")
	}
	if h.KubeVersion != "" {
		args = append(args, "--kube-version", h.KubeVersion)
	}
	for _, v := range h.APIVersions {
		args = append(args, "--api-versions", v)
	}
	for _, f := range h.ValueFiles {
		args = append(args, "--values", filepath.Join(chart, f))
	}
	if h.Values != "" {
		args = append(args, "--values", "-") // stdin
	}
	for _, p := range h.Parameters {
		flag := "--set"
		if p.ForceString {
			flag = "--set-string"
		}
		args = append(args, flag, p.Name+"="+escapeCommas(p.Value))
	}
	for _, p := range h.FileParameters {
		args = append(args, "--set-file", p.Name+"="+filepath.Join(chart, p.Path))
	}
	return args
}

// Rendering equals `helm template` object by object, on a chart with
// subcharts and an alias, global values, required and fail, tpl, lookup,
// .Capabilities checks, crds/, hooks (a test hook too), a library chart
// and a values schema.
func TestRenderEqualsHelmTemplate(t *testing.T) {
	bin := helmBin(t)
	for _, tc := range []struct {
		name    string
		src     v1alpha1.HelmSource
		wantErr string
	}{
		{name: "the chart's own values", src: v1alpha1.HelmSource{}},
		{name: "values files, values, parameters and file parameters in Argo CD's precedence", src: v1alpha1.HelmSource{
			ValueFiles: []string{"files/prod.yaml"},
			Values:     "image: {tag: \"1.28\"}\nsub: {color: orange}\n",
			Parameters: []v1alpha1.HelmParameter{
				{Name: "replicas", Value: "5"},
				{Name: "image.tag", Value: "1.29", ForceString: true},
				{Name: "greeting", Value: "a,b {{ .Chart.Name }}"},
			},
			FileParameters: []v1alpha1.HelmFileParameter{{Name: "config", Path: "files/config.txt"}},
		}},
		{name: "capabilities from kubeVersion and apiVersions, CRDs skipped", src: v1alpha1.HelmSource{
			KubeVersion: "1.29.3", APIVersions: []string{"monitoring.coreos.com/v1"}, SkipCrds: true,
		}},
		{name: "fail stops the render", src: v1alpha1.HelmSource{Parameters: []v1alpha1.HelmParameter{{Name: "failMe", Value: "true"}}},
			wantErr: "failMe is set: unset it"},
		{name: "required stops the render", src: v1alpha1.HelmSource{Parameters: []v1alpha1.HelmParameter{{Name: "image.tag", Value: "null"}}},
			wantErr: "set image.tag"},
		{name: "the values schema refuses a string", src: v1alpha1.HelmSource{Parameters: []v1alpha1.HelmParameter{{Name: "replicas", Value: "many", ForceString: true}}},
			wantErr: "replicas"},
		{name: "skipSchemaValidation lets it through", src: v1alpha1.HelmSource{SkipSchemaValidation: true, Parameters: []v1alpha1.HelmParameter{{Name: "replicas", Value: "-1"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			src.ReleaseName, src.Namespace = "guestbook", "web"
			cmd := exec.CommandContext(t.Context(), bin, helmArgs("umbrella", &src)...)
			cmd.Dir = "testdata"
			cmd.Stdin = strings.NewReader(src.Values)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, helmErr := cmd.Output()

			got, err := Render(t.Context(), Options{Files: dirFiles("testdata"), ChartDir: "umbrella", Source: &src})
			if tc.wantErr != "" {
				if helmErr == nil || !strings.Contains(stderr.String(), tc.wantErr) {
					t.Fatalf("helm: err = %v, stderr %s; want %q", helmErr, stderr.String(), tc.wantErr)
				}
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "chart umbrella (umbrella)") {
					t.Fatalf("deputy: err = %v, want it to name the chart and contain %q (helm: %s)", err, tc.wantErr, stderr.String())
				}
				return
			}
			if helmErr != nil {
				t.Fatalf("helm: %v: %s", helmErr, stderr.String())
			}
			if err != nil {
				t.Fatal(err)
			}
			want, err := decode(string(out), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 {
				t.Fatal("helm rendered nothing")
			}
			if diff := cmp.Diff(objects(want), objects(got)); diff != "" {
				t.Errorf("deputy's render differs from helm template (-helm +deputy):\n%s", diff)
			}
		})
	}
}

// The Argo CD value precedence, read in the rendered objects.
func TestValuePrecedence(t *testing.T) {
	src := &v1alpha1.HelmSource{
		ReleaseName: "r", Namespace: "n",
		ValueFiles:   []string{"files/prod.yaml"},
		ValuesObject: &runtime.RawExtension{Raw: []byte(`{"sub":{"color":"object"},"replicas":7}`)},
		Values:       "sub: {color: ignored-when-valuesObject}\n",
		Parameters:   []v1alpha1.HelmParameter{{Name: "replicas", Value: "8"}, {Name: "image.tag", Value: "1.0", ForceString: true}, {Name: "image.tag", Value: "2"}},
	}
	got, err := Render(t.Context(), Options{Files: dirFiles("testdata"), ChartDir: "umbrella", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*unstructured.Unstructured{}
	for _, o := range got {
		byName[o.GetKind()+"/"+o.GetName()] = o
	}
	if c, _, _ := unstructured.NestedString(byName["ConfigMap/r-sub"].Object, "data", "color"); c != "object" {
		t.Errorf("sub color = %q, want valuesObject's (over the values file, values ignored)", c)
	}
	if e, _, _ := unstructured.NestedString(byName["ConfigMap/r-config"].Object, "data", "env"); e != "prod" {
		t.Errorf("global env = %q, want the values file's", e)
	}
	if r, _, _ := unstructured.NestedInt64(byName["Deployment/r-web"].Object, "spec", "replicas"); r != 8 {
		t.Errorf("replicas = %d, want the parameter's 8 (over valuesObject's 7)", r)
	}
	img, _, _ := unstructured.NestedSlice(byName["Deployment/r-web"].Object, "spec", "template", "spec", "containers")
	if i := img[0].(map[string]any)["image"]; i != "nginx:1.0" {
		t.Errorf("image = %v, want the forceString parameter's 1.0 (--set-string after --set)", i)
	}
}

func objects(objs []*unstructured.Unstructured) []map[string]any {
	out := make([]map[string]any, len(objs))
	for i, o := range objs {
		out[i] = o.Object
	}
	return out
}

// dirFiles is Files over a directory of the test's.
type dirFiles string

func (d dirFiles) ReadFile(p string) ([]byte, error) {
	return os.ReadFile(filepath.Join(string(d), filepath.FromSlash(p)))
}

func (d dirFiles) ReadDir(p string) ([]string, error) {
	es, err := os.ReadDir(filepath.Join(string(d), filepath.FromSlash(p)))
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names, err
}

func (d dirFiles) IsDir(p string) bool {
	fi, err := os.Stat(filepath.Join(string(d), filepath.FromSlash(p)))
	return err == nil && fi.IsDir()
}

// A chart whose templates render only hooks (its release manifest is
// empty) renders the hooks, as helm template prints them.
func TestHooksOnlyChartEqualsHelmTemplate(t *testing.T) {
	bin := helmBin(t)
	src := v1alpha1.HelmSource{ReleaseName: "guestbook", Namespace: "web"}
	cmd := exec.CommandContext(t.Context(), bin, helmArgs("hooks-only", &src)...)
	cmd.Dir = "testdata"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm: %v", err)
	}
	want, err := decode(string(out), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Render(t.Context(), Options{Files: dirFiles("testdata"), ChartDir: "hooks-only", Source: &src})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 1 || want[0].GetName() != "guestbook-migrate" {
		t.Fatalf("helm template rendered %v, want the one hook", objects(want))
	}
	if diff := cmp.Diff(objects(want), objects(got)); diff != "" {
		t.Errorf("deputy's render differs from helm template (-helm +deputy):\n%s", diff)
	}
}

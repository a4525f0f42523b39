package helm

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"

	"deputy.dev/deputy/policy/v1alpha1"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *v1alpha1.HelmSource
		want string // "" is valid
	}{
		{"no helm field is valid", nil, ""},
		{"every field set well is valid", &v1alpha1.HelmSource{
			ValueFiles: []string{"values-prod.yaml", "/envs/prod.yaml"}, Values: "a: 1", Parameters: []v1alpha1.HelmParameter{{Name: "a", Value: "2"}},
			FileParameters: []v1alpha1.HelmFileParameter{{Name: "c", Path: "files/c.txt"}}, KubeVersion: "1.37.2-gke.1", APIVersions: []string{"v1", "apps/v1", "monitoring.coreos.com/v1/ServiceMonitor"},
		}, ""},
		{"a values URL is refused", &v1alpha1.HelmSource{ValueFiles: []string{"https://example.com/v.yaml"}}, `spec.source.helm.valueFiles[0]: Invalid value: "https://example.com/v.yaml": URLs are not supported: commit the file`},
		{"an empty values file is refused", &v1alpha1.HelmSource{ValueFiles: []string{""}}, "spec.source.helm.valueFiles[0]: Invalid value: \"\": give a path in the repository"},
		{"a $ref values file is valid in form (whether the ref exists is the spec's check)", &v1alpha1.HelmSource{ValueFiles: []string{"$values/prod.yaml"}}, ""},
		{"a $ref values file that climbs out of the referenced repository is refused", &v1alpha1.HelmSource{ValueFiles: []string{"$values/../../etc/passwd"}}, `spec.source.helm.valueFiles[0]: Invalid value: "$values/../../etc/passwd": the path after $values/ must stay inside that source's repository`},
		{"a $ref with a bad name is refused", &v1alpha1.HelmSource{ValueFiles: []string{"$val.ues/prod.yaml"}}, "a reference to another source is $REF/path"},
		{"a $ref without a file is refused", &v1alpha1.HelmSource{ValueFiles: []string{"$values/"}}, "give a file after $values/"},
		{"values that are not a map are refused", &v1alpha1.HelmSource{Values: "- a\n- b\n"}, "spec.source.helm.values: Invalid value: \"\": not a YAML map"},
		{"a valuesObject that is not a map is refused", &v1alpha1.HelmSource{ValuesObject: &runtime.RawExtension{Raw: []byte(`[1]`)}}, "spec.source.helm.valuesObject: Invalid value"},
		{"Argo CD's build environment in a parameter is refused", &v1alpha1.HelmSource{Parameters: []v1alpha1.HelmParameter{{Name: "app", Value: "$ARGOCD_APP_NAME"}}}, `spec.source.helm.parameters[0].value: Invalid value: "$ARGOCD_APP_NAME": Argo CD's build environment variables`},
		{"Argo CD's build environment in a values file path is refused", &v1alpha1.HelmSource{ValueFiles: []string{"values-${ARGOCD_APP_NAME}.yaml"}}, "spec.source.helm.valueFiles[0]: Invalid value: \"values-${ARGOCD_APP_NAME}.yaml\": Argo CD's build environment variables"},
		{"a parameter needs a name", &v1alpha1.HelmSource{Parameters: []v1alpha1.HelmParameter{{Value: "x"}}}, "spec.source.helm.parameters[0].name: Required value"},
		{"a file parameter needs a name and a path", &v1alpha1.HelmSource{FileParameters: []v1alpha1.HelmFileParameter{{}}}, "spec.source.helm.fileParameters[0].name: Required value: name the value to set, e.g. config, spec.source.helm.fileParameters[0].path: Invalid value"},
		{"a bad kubeVersion is refused", &v1alpha1.HelmSource{KubeVersion: "latest"}, `spec.source.helm.kubeVersion: Invalid value: "latest": give a Kubernetes version such as 1.37.0`},
		{"an empty apiVersion is refused", &v1alpha1.HelmSource{APIVersions: []string{""}}, "spec.source.helm.apiVersions[0]: Invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.h)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestResolvePath(t *testing.T) {
	for _, tc := range []struct{ dir, p, want, err string }{
		{"apps/web", "values.yaml", "apps/web/values.yaml", ""},
		{"apps/web", "../shared/v.yaml", "apps/shared/v.yaml", ""},
		{"apps/web", "/envs/prod.yaml", "envs/prod.yaml", ""},
		{"", "v.yaml", "v.yaml", ""},
		{"apps/web", "../../../etc/passwd", "", "leaves the repository"},
		{"apps/web", "/../x", "", "leaves the repository"},
	} {
		got, err := resolvePath(tc.dir, tc.p)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("resolvePath(%q, %q) = %q, %v; want %q, %q", tc.dir, tc.p, got, err, tc.want, tc.err)
		}
	}
}

func TestEscapeCommas(t *testing.T) {
	for in, want := range map[string]string{"a,b": `a\,b`, `a\,b`: `a\,b`, "{a,b}": "{a,b}", "plain": "plain"} {
		if got := escapeCommas(in); got != want {
			t.Errorf("escapeCommas(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigured(t *testing.T) {
	if Configured(nil) || Configured(&v1alpha1.HelmSource{ReleaseName: "a", Namespace: "b", KubeVersion: "v1.36.4", APIVersions: []string{"v1", "v1/ConfigMap"}}) {
		t.Error("a release name, namespace and the destination's capabilities alone (the sync engine's defaults) configure nothing")
	}
	if Configured(&v1alpha1.HelmSource{KubeVersion: "1.37.0", APIVersions: []string{"v1"}}) {
		t.Error("capabilities alone (deputy render's --kube-version, --api-versions) configure nothing")
	}
	if !Configured(&v1alpha1.HelmSource{SkipCrds: true}) {
		t.Error("skipCrds configures the render")
	}
}

// memFiles is Files over a map of paths to contents.
type memFiles map[string]string

func (m memFiles) ReadFile(p string) ([]byte, error) {
	if s, ok := m[p]; ok {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
}

func (m memFiles) ReadDir(p string) ([]string, error) {
	seen := map[string]bool{}
	for k := range m {
		if rest, ok := strings.CutPrefix(k, p+"/"); ok || p == "" {
			if p == "" {
				rest = k
			}
			seen[strings.SplitN(rest, "/", 2)[0]] = true
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (m memFiles) IsDir(p string) bool {
	for k := range m {
		if strings.HasPrefix(k, p+"/") {
			return true
		}
	}
	return false
}

const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Chart.Name }}-{{ .Values.v | default \"none\" }}}\n"

func TestDependencies(t *testing.T) {
	chart := func(name, deps string) memFiles {
		return memFiles{path.Join("apps", name, "Chart.yaml"): "apiVersion: v2\nname: " + name + "\nversion: 0.1.0\n" + deps, path.Join("apps", name, "templates/cm.yaml"): cm}
	}
	merge := func(ms ...memFiles) memFiles {
		out := memFiles{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		files memFiles
		want  []string
		err   string
	}{
		{"a file:// dependency in the repository is loaded from it", merge(chart("app", "dependencies:\n- {name: common, version: 0.1.0, repository: 'file://../common'}\n"), chart("common", "")),
			[]string{"ConfigMap/app-none", "ConfigMap/common-none"}, ""},
		{"a file:// dependency outside the repository is refused", chart("app", "dependencies:\n- {name: common, version: 0.1.0, repository: 'file://../../../common'}\n"),
			nil, "chart apps/app: Chart.yaml dependency common (repository file://../../../common): ../../../common leaves the repository"},
		{"an absolute file:// dependency is refused", chart("app", "dependencies:\n- {name: common, version: 0.1.0, repository: 'file:///srv/common'}\n"),
			nil, "an absolute path is outside the repository"},
		{"a remote dependency must be vendored", chart("app", "dependencies:\n- {name: redis, version: 1.0.0, repository: 'https://charts.example.com'}\n"),
			nil, "chart app (apps/app): found in Chart.yaml, but missing in charts/ directory: redis: vendor the dependency under charts/"},
		{"a file:// dependency naming another chart is refused", merge(chart("app", "dependencies:\n- {name: other, version: 0.1.0, repository: 'file://../common'}\n"), chart("common", "")),
			nil, "the chart there is named common: name the dependency as its Chart.yaml does"},
		{"a library chart is not rendered", memFiles{"apps/app/Chart.yaml": "apiVersion: v2\nname: app\nversion: 0.1.0\ntype: library\n", "apps/app/templates/_x.tpl": ""},
			nil, "chart app (apps/app) is of type library, which helm template does not render"},
		{"a dependency cycle ends", merge(chart("app", "dependencies:\n- {name: app, version: 0.1.0, repository: 'file://.'}\n")),
			nil, "nest more than 10 deep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Render(t.Context(), Options{Files: tc.files, ChartDir: "apps/app", Source: &v1alpha1.HelmSource{ReleaseName: "r"}})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
			}
			sort.Strings(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValuesFileErrors(t *testing.T) {
	files := memFiles{"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n", "c/templates/cm.yaml": cm, "c/bad.yaml": "- not\n- a map\n"}
	for _, tc := range []struct {
		name string
		h    v1alpha1.HelmSource
		want string
	}{
		{"a missing values file names the field and the fix", v1alpha1.HelmSource{ValueFiles: []string{"prod.yaml"}}, "chart c (c): spec.source.helm.valueFiles[0]: values file c/prod.yaml does not exist in the repository: fix the path (relative to the chart's directory, or absolute from the repository's root) or set ignoreMissingValueFiles"},
		{"a values file that is not a map", v1alpha1.HelmSource{ValueFiles: []string{"bad.yaml"}}, "spec.source.helm.valueFiles[0]: values file c/bad.yaml is not a YAML map"},
		{"a values file leaving the repository", v1alpha1.HelmSource{ValueFiles: []string{"../../x.yaml"}}, "spec.source.helm.valueFiles[0]: ../../x.yaml leaves the repository"},
		{"a missing file parameter", v1alpha1.HelmSource{FileParameters: []v1alpha1.HelmFileParameter{{Name: "v", Path: "nope.txt"}}}, "spec.source.helm.fileParameters[0] (v): file c/nope.txt does not exist in the repository"},
		{"a bad parameter name", v1alpha1.HelmSource{Parameters: []v1alpha1.HelmParameter{{Name: "a[x]", Value: "1"}}}, "spec.source.helm.parameters[0] (a[x])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(t.Context(), Options{Files: files, ChartDir: "c", Source: &tc.h})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

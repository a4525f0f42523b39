package helm

import (
	"strings"
	"testing"

	"deputy.dev/deputy/policy/v1alpha1"
)

// TestRefValueFiles: "$REF/path" reads path from the root of the ref
// source's repository, never from the chart's, and never outside it.
func TestRefValueFiles(t *testing.T) {
	chart := memFiles{"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n", "c/templates/cm.yaml": cm, "c/prod.yaml": "v: from-chart-repo\n", "secret.yaml": "v: chart-repo-root\n"}
	values := memFiles{"c/prod.yaml": "v: from-values-repo\n", "env/more.txt": "more"}
	refs := map[string]Files{"values": values}
	for _, tc := range []struct {
		name    string
		h       v1alpha1.HelmSource
		refs    map[string]Files
		want    string // the ConfigMap's name, or "" for an error
		wantErr string
	}{
		{"a $values file reads from the ref source's root", v1alpha1.HelmSource{ValueFiles: []string{"$values/c/prod.yaml"}}, refs, "c-from-values-repo", ""},
		{"a later local file wins over a $values file", v1alpha1.HelmSource{ValueFiles: []string{"$values/c/prod.yaml", "prod.yaml"}}, refs, "c-from-chart-repo", ""},
		{"a $values file parameter reads from the ref source", v1alpha1.HelmSource{FileParameters: []v1alpha1.HelmFileParameter{{Name: "v", Path: "$values/env/more.txt"}}}, refs, "c-more", ""},
		{"an unknown ref names the value file and the refs that exist", v1alpha1.HelmSource{ValueFiles: []string{"$config/prod.yaml"}}, refs, "",
			`spec.source.helm.valueFiles[0]: $config/prod.yaml names $config, but no source of spec.sources has ref "config" (refs: values)`},
		{"a $ref without any ref source says none exist", v1alpha1.HelmSource{ValueFiles: []string{"$values/prod.yaml"}}, nil, "", "(refs: none)"},
		{"attack: $values/.. cannot reach the chart's repository or anything else", v1alpha1.HelmSource{ValueFiles: []string{"$values/../secret.yaml"}}, refs, "",
			"the path after $values/ must stay inside that source's repository"},
		{"attack: $values/a/../../ cannot climb out either", v1alpha1.HelmSource{ValueFiles: []string{"$values/env/../../secret.yaml"}}, refs, "", "must stay inside that source's repository"},
		{"a missing $values file names the ref and the path", v1alpha1.HelmSource{ValueFiles: []string{"$values/nope.yaml"}}, refs, "",
			"values file $values/nope.yaml does not exist in the repository of the source whose ref is values (nope.yaml from its root)"},
		{"a missing $values file is skipped with ignoreMissingValueFiles", v1alpha1.HelmSource{ValueFiles: []string{"$values/nope.yaml"}, IgnoreMissingValueFiles: true}, refs, "c-none", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Render(t.Context(), Options{Files: chart, Refs: tc.refs, ChartDir: "c", Source: &tc.h})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != 1 || objs[0].GetName() != tc.want {
				t.Fatalf("rendered %v, want one ConfigMap %s", objs, tc.want)
			}
		})
	}
}

// TestResolveFileConfinesRefs checks the render's own check, behind
// HelmSource.Validate's: a $REF path with a ".." segment is refused.
func TestResolveFileConfinesRefs(t *testing.T) {
	refs := map[string]Files{"values": memFiles{}}
	for _, p := range []string{"$values/../x.yaml", "$values/a/../../x.yaml", "$values/a/../b.yaml"} {
		if _, _, err := resolveFile(memFiles{}, refs, "c", p); err == nil || !strings.Contains(err.Error(), "leaves the repository of the source whose ref is values") {
			t.Errorf("resolveFile(%q) = %v, want it refused", p, err)
		}
	}
	files, full, err := resolveFile(memFiles{}, refs, "c", "$values//env/prod.yaml")
	if err != nil || full != "env/prod.yaml" || files == nil {
		t.Errorf("resolveFile($values//env/prod.yaml) = %q, %v; want env/prod.yaml of the ref repository", full, err)
	}
}

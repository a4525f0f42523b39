package v1alpha1

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidateSources(t *testing.T) {
	chart := ApplicationSource{RepoURL: "https://git.example.com/charts.git", Path: "web", Helm: &HelmSource{ValueFiles: []string{"$values/web/prod.yaml"}}}
	values := ApplicationSource{RepoURL: "https://git.example.com/values.git", Ref: "values"}
	for _, tc := range []struct {
		name string
		spec ApplicationSpec
		want []string // substrings of the error, in order; none: valid
	}{
		{"a chart with values from a ref source is valid", ApplicationSpec{Sources: []ApplicationSource{chart, values}}, nil},
		{"spec.source alone is valid", ApplicationSpec{Source: ApplicationSource{RepoURL: "https://git.example.com/a.git"}}, nil},
		{"attack: a $ref value file that climbs out of the referenced repository is refused",
			ApplicationSpec{Sources: []ApplicationSource{{RepoURL: chart.RepoURL, Path: "web", Helm: &HelmSource{ValueFiles: []string{"$values/../../../etc/passwd"}}}, values}},
			[]string{`spec.sources[0].helm.valueFiles[0]: Invalid value: "$values/../../../etc/passwd": the path after $values/ must stay inside that source's repository: remove the ..`}},
		{"attack: a $ref file parameter that climbs out is refused",
			ApplicationSpec{Sources: []ApplicationSource{{RepoURL: chart.RepoURL, Path: "web", Helm: &HelmSource{FileParameters: []HelmFileParameter{{Name: "a", Path: "$values/x/../../y"}}}}, values}},
			[]string{`spec.sources[0].helm.fileParameters[0].path: Invalid value: "$values/x/../../y": the path after $values/ must stay inside`}},
		{"an unknown $ref names the value file and the refs that exist",
			ApplicationSpec{Sources: []ApplicationSource{{RepoURL: chart.RepoURL, Path: "web", Helm: &HelmSource{ValueFiles: []string{"$config/prod.yaml"}}}, values}},
			[]string{`spec.sources[0].helm.valueFiles[0]: Invalid value: "$config/prod.yaml": no source of spec.sources has ref "config" (refs: values)`}},
		{"a $ref in spec.source needs spec.sources",
			ApplicationSpec{Source: ApplicationSource{RepoURL: chart.RepoURL, Path: "web", Helm: &HelmSource{ValueFiles: []string{"$values/prod.yaml"}}}},
			[]string{`spec.source.helm.valueFiles[0]: Invalid value: "$values/prod.yaml": $REF/path reads from another source, which needs spec.sources`}},
		{"spec.source and spec.sources together are refused",
			ApplicationSpec{Source: ApplicationSource{RepoURL: "https://git.example.com/a.git"}, Sources: []ApplicationSource{chart, values}},
			[]string{"spec.source: Forbidden: spec.source and spec.sources are both set"}},
		{"a ref with a dot is refused (Argo CD's rule)",
			ApplicationSpec{Sources: []ApplicationSource{chart, values, {RepoURL: values.RepoURL, Ref: "my.values"}}},
			[]string{`spec.sources[2].ref: Invalid value: "my.values": a ref may hold only letters, digits, '_' and '-'`}},
		{"a duplicate ref is refused naming both sources",
			ApplicationSpec{Sources: []ApplicationSource{chart, values, {RepoURL: chart.RepoURL, Ref: "values"}}},
			[]string{`spec.sources[2].ref: Duplicate value: "values (also spec.sources[1].ref): give each source its own ref"`}},
		{"a ref with chart is refused",
			ApplicationSpec{Sources: []ApplicationSource{{RepoURL: "https://charts.example.com", Chart: "web", Ref: "web"}}},
			[]string{`spec.sources[0].ref: Invalid value: "web": a source with ref cannot have chart`}},
		{"a source of spec.sources needs a path, a chart or a ref",
			ApplicationSpec{Sources: []ApplicationSource{{RepoURL: chart.RepoURL}}},
			[]string{`spec.sources[0].path: Required value: each of spec.sources needs a path ("." for the repository's root), a chart or a ref`}},
		{"a source of spec.sources needs a repoURL and a path inside the repository",
			ApplicationSpec{Sources: []ApplicationSource{values, {Path: "../x"}}},
			[]string{"spec.sources[1].repoURL: Required value", `spec.sources[1].path: Invalid value: "../x": must stay inside the repository`}},
		{"ref in spec.source is refused", ApplicationSpec{Source: ApplicationSource{RepoURL: chart.RepoURL, Ref: "values"}},
			[]string{`spec.source.ref: Invalid value: "values": ref names a source of spec.sources`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.ValidateSources().ToAggregate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("ValidateSources = %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateSources = nil, want %q", tc.want)
			}
			msg := err.Error()
			for _, w := range tc.want {
				i := strings.Index(msg, w)
				if i < 0 {
					t.Fatalf("ValidateSources = %v\nwant it to contain %q", msg, w)
				}
				msg = msg[i+len(w):]
			}
		})
	}
}

func TestSourcesHelpers(t *testing.T) {
	spec := ApplicationSpec{Sources: []ApplicationSource{
		{RepoURL: "a", Path: "web", Helm: &HelmSource{ValueFiles: []string{"$values/a.yaml", "local.yaml", "$values/b.yaml"}, FileParameters: []HelmFileParameter{{Name: "x", Path: "$files/x"}}}},
		{RepoURL: "b", Ref: "values"},
		{RepoURL: "c", Ref: "files", Path: "."},
	}}
	if diff := cmp.Diff([]string{"values", "files"}, spec.Sources[0].UsedRefs()); diff != "" {
		t.Errorf("UsedRefs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"values", "files"}, spec.Refs()); diff != "" {
		t.Errorf("Refs (-want +got):\n%s", diff)
	}
	if got := []bool{spec.Sources[0].Renders(), spec.Sources[1].Renders(), spec.Sources[2].Renders()}; !cmp.Equal(got, []bool{true, false, true}) {
		t.Errorf("Renders = %v, want a ref-only source not to render", got)
	}
	if got := spec.SourcePath(1).String(); got != "spec.sources[1]" {
		t.Errorf("SourcePath(1) = %s", got)
	}
	single := ApplicationSpec{Source: ApplicationSource{RepoURL: "a"}}
	if got := single.GetSources(); len(got) != 1 || got[0].RepoURL != "a" || single.SourcePath(0).String() != "spec.source" {
		t.Errorf("GetSources of spec.source = %v", got)
	}
	st := SyncStatus{Revision: "abc"}
	if diff := cmp.Diff([]string{"abc"}, st.RevisionList()); diff != "" {
		t.Errorf("RevisionList: %s", diff)
	}
	st = SyncStatus{Revisions: []string{"a", "b"}}
	if diff := cmp.Diff([]string{"a", "b"}, st.RevisionList()); diff != "" {
		t.Errorf("RevisionList: %s", diff)
	}
}

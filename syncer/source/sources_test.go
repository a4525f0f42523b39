package source

import (
	"errors"
	"strings"
	"testing"

	"deputy.dev/deputy/policy/v1alpha1"
)

// A Helm source reads $values/... from a second repository, at the commit
// the ref names (not that repository's HEAD), through symbolic links that
// stay inside it; links that leave it and files over the limits are refused.
func TestRenderWithRefs(t *testing.T) {
	charts := newTestRepo(t)
	charts.write("web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
	charts.write("web/templates/sa.yaml", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: {{ .Values.name | default \"none\" }}}\n")
	charts.write("secret.yaml", "name: from-the-chart-repository\n")
	charts.commit("chart")
	values := newTestRepo(t)
	values.write("web/prod.yaml", "name: first\n")
	first := values.commit("first")
	values.write("web/prod.yaml", "name: second\n")
	values.symlink("web/link.yaml", "prod.yaml")
	values.symlink("web/escape.yaml", "../../"+strings.TrimPrefix(charts.dir, "/")+"/secret.yaml")
	values.write("big.yaml", "name: "+strings.Repeat("x", 2<<20)+"\n")
	second := values.commit("second")

	render := func(t *testing.T, c *Cache, file, rev string) (*Rendered, error) {
		src := v1alpha1.ApplicationSource{RepoURL: charts.dir, Path: "web", Helm: &v1alpha1.HelmSource{ValueFiles: []string{file}}}
		return c.Render(t.Context(), src, "", WithRefs(Ref{Name: "values", RepoURL: values.dir, Revision: rev}))
	}
	for _, tc := range []struct {
		name, file, rev, want, wantErr string
	}{
		{"the values repository at the ref's commit", "$values/web/prod.yaml", second.String(), "second", ""},
		{"an older commit of the values repository", "$values/web/prod.yaml", first.String(), "first", ""},
		{"a symbolic link inside the values repository is followed", "$values/web/link.yaml", second.String(), "second", ""},
		{"attack: a symbolic link out of the values repository is refused", "$values/web/escape.yaml", second.String(), "", "outside the repository"},
		{"attack: $values/.. cannot read the chart repository", "$values/../secret.yaml", second.String(), "", "must stay inside that source's repository"},
		{"a missing file names the ref", "$values/nope.yaml", second.String(), "", "does not exist in the repository of the source whose ref is values"},
		{"an unknown revision of the ref names it", "$values/web/prod.yaml", "nope", "", "the source whose ref is values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, testCache(t), tc.file, tc.rev)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(out.Objects); len(got) != 1 || got[0] != "ServiceAccount/"+tc.want {
				t.Fatalf("objects = %v, want ServiceAccount/%s", got, tc.want)
			}
		})
	}
	t.Run("a ref's files count against the render's limits", func(t *testing.T) {
		c := testCache(t)
		c.limits = DefaultLimits()
		c.limits.MaxFileBytes = 1 << 20
		_, err := render(t, c, "$values/big.yaml", second.String())
		var le *LimitError
		if !errors.As(err, &le) || le.Field != FieldMaxFileBytes {
			t.Fatalf("err = %v, want a *LimitError naming %s", err, FieldMaxFileBytes)
		}
	})
	t.Run("a ref in the source's own repository reuses it", func(t *testing.T) {
		src := v1alpha1.ApplicationSource{RepoURL: charts.dir, Path: "web", Helm: &v1alpha1.HelmSource{ValueFiles: []string{"$self/secret.yaml"}}}
		out, err := testCache(t).Render(t.Context(), src, "", WithRefs(Ref{Name: "self", RepoURL: charts.dir, Revision: "HEAD"}))
		if err != nil {
			t.Fatal(err)
		}
		if got := names(out.Objects); len(got) != 1 || got[0] != "ServiceAccount/from-the-chart-repository" {
			t.Fatalf("objects = %v", got)
		}
	})
}

package syncer

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/source"
)

// commitFiles writes files into the Git repository dir (created when
// missing) and commits them; it returns the commit SHA.
func commitFiles(t *testing.T, dir string, files map[string]string) string {
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
	h, err := wt.Commit("files", &git.CommitOptions{Author: &object.Signature{Name: "test", Email: "test@example.com", When: time.Unix(1700000000, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// multiSourceRepos is a chart in one repository and its values in another.
type multiSourceRepos struct {
	charts, values       string
	chartsSHA, valuesSHA string
	cache                *source.Cache
	app                  *v1alpha1.Application
}

func newMultiSourceRepos(t *testing.T) *multiSourceRepos {
	t.Helper()
	root := t.TempDir()
	m := &multiSourceRepos{charts: filepath.Join(root, "charts"), values: filepath.Join(root, "values")}
	m.chartsSHA = commitFiles(t, m.charts, map[string]string{
		"web/Chart.yaml":        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
		"web/values.yaml":       "sa: default-name\n",
		"web/templates/sa.yaml": "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: {{ .Values.sa }}}\n",
		"plain/cm.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {big: " + strings.Repeat("x", 4096) + "}\n",
	})
	m.valuesSHA = commitFiles(t, m.values, map[string]string{
		"web/prod.yaml": "sa: from-values\n",
		"extra/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\n",
	})
	c, err := source.New(source.Options{CacheDir: t.TempDir(), LocalRepositories: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	m.cache = c
	m.app = &v1alpha1.Application{Spec: v1alpha1.ApplicationSpec{
		Project: "guestbook",
		Sources: []v1alpha1.ApplicationSource{
			{RepoURL: m.charts, Path: "web", Helm: &v1alpha1.HelmSource{ValueFiles: []string{"$values/web/prod.yaml"}}},
			{RepoURL: m.values, Ref: "values"},
			{RepoURL: m.charts, Path: "plain"},
		},
		Destination: v1alpha1.ApplicationDestination{Server: InClusterServer, Namespace: "guestbook"},
	}}
	m.app.Namespace, m.app.Name = "argocd", "guestbook"
	return m
}

func TestRenderApplicationMultipleSources(t *testing.T) {
	m := newMultiSourceRepos(t)
	r, err := source.RenderApplication(t.Context(), m.cache, m.app, v1alpha1.SyncOperation{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range r.Objects {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if diff := cmp.Diff([]string{"ServiceAccount/from-values", "ConfigMap/plain"}, got); diff != "" {
		t.Errorf("objects in source order, the ref-only source lending files only (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{m.chartsSHA, m.valuesSHA, m.chartsSHA}, r.Revisions); diff != "" {
		t.Errorf("revisions, one per source (-want +got):\n%s", diff)
	}

	t.Run("a values commit given in revisions is the one read", func(t *testing.T) {
		newer := commitFiles(t, m.values, map[string]string{"web/prod.yaml": "sa: newer\n"})
		r, err := source.RenderApplication(t.Context(), m.cache, m.app, v1alpha1.SyncOperation{Revisions: []string{"", m.valuesSHA, ""}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Objects[0].GetName() != "from-values" || r.Revisions[1] != m.valuesSHA {
			t.Errorf("got %s at %v, want from-values at the given commit", r.Objects[0].GetName(), r.Revisions)
		}
		r, err = source.RenderApplication(t.Context(), m.cache, m.app, v1alpha1.SyncOperation{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Objects[0].GetName() != "newer" || r.Revisions[1] != newer {
			t.Errorf("got %s at %v, want newer at HEAD", r.Objects[0].GetName(), r.Revisions)
		}
	})

	for _, tc := range []struct {
		name   string
		mutate func(a *v1alpha1.Application)
		sync   v1alpha1.SyncOperation
		want   string
	}{
		{"one revision for several sources is refused", nil, v1alpha1.SyncOperation{Revision: "main"},
			`operation.sync.revision "main" names one revision, but this Application has 3 sources (spec.sources): give operation.sync.revisions`},
		{"revisions not one per source are refused", nil, v1alpha1.SyncOperation{Revisions: []string{"a"}},
			"operation.sync.revisions has 1 revisions, but this Application has 3 sources"},
		{"an object rendered by two sources names both", func(a *v1alpha1.Application) {
			a.Spec.Sources = append(a.Spec.Sources, v1alpha1.ApplicationSource{RepoURL: m.charts, Path: "plain"})
		}, v1alpha1.SyncOperation{},
			"ConfigMap guestbook/plain is rendered by spec.sources[2] (" + "CHARTS, path plain) and by spec.sources[3] (CHARTS, path plain): an object may come from one source only"},
		{"an unknown ref fails before any fetch, naming the refs", func(a *v1alpha1.Application) {
			a.Spec.Sources[0].Helm.ValueFiles = []string{"$config/prod.yaml"}
		}, v1alpha1.SyncOperation{}, `no source of spec.sources has ref "config" (refs: values)`},
		{"a source that fails names it", func(a *v1alpha1.Application) { a.Spec.Sources[2].Path = "nope" }, v1alpha1.SyncOperation{},
			"spec.sources[2] (CHARTS, path nope): path \"nope\" does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := m.app.DeepCopy()
			if tc.mutate != nil {
				tc.mutate(app)
			}
			_, err := source.RenderApplication(t.Context(), m.cache, app, tc.sync)
			want := strings.ReplaceAll(tc.want, "CHARTS", m.charts)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, want)
			}
		})
	}
}

// Attack: a ref source whose repository the project does not permit is
// refused before anything is fetched, naming the source and sourceRepos;
// so is an unpermitted source that renders.
func TestRunRefusesAnUnpermittedRefSourceBeforeAnyFetch(t *testing.T) {
	var hits atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(evil.Close)
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	f.project.Spec.SourceRepos = []string{f.repoDir}
	for i, srcs := range [][]v1alpha1.ApplicationSource{
		{{RepoURL: f.repoDir, Path: "app", Helm: &v1alpha1.HelmSource{}}, {RepoURL: evil.URL + "/values.git", Ref: "values"}},
		{{RepoURL: evil.URL + "/values.git", Path: "app"}, {RepoURL: f.repoDir, Path: "app"}},
	} {
		app := f.app(func(a *v1alpha1.Application) { a.Spec.Source = v1alpha1.ApplicationSource{}; a.Spec.Sources = srcs })
		st := f.engine.Run(t.Context(), Request{Application: app, Project: f.project}, nil)
		want := "application repo " + evil.URL + "/values.git is not permitted in project 'guestbook'"
		if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, want) || !strings.Contains(st.Message, "spec.sources[") {
			t.Errorf("case %d: phase %s: %s\nwant Error naming the source and %q", i, st.Phase, st.Message, want)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the unpermitted repository was fetched %d times", n)
	}
	if len(f.fake.requests) != 0 {
		t.Errorf("the cluster was touched: %v", f.fake.requests)
	}
}

// A multi-source Application's operation records one revision per source
// (syncResult.revisions) and no single revision, as Argo CD does.
func TestRunRecordsRevisionsPerSource(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	f.fake.serveDiscovery = true // the identity's discovery comes before the render
	app := f.app(func(a *v1alpha1.Application) {
		a.Spec.Source = v1alpha1.ApplicationSource{}
		a.Spec.Sources = []v1alpha1.ApplicationSource{{RepoURL: f.repoDir, Path: "app"}, {RepoURL: f.repoDir, Ref: "files"}}
	})
	st := f.engine.Run(t.Context(), Request{Application: app, Project: f.project}, nil)
	if st.SyncResult == nil || len(st.SyncResult.Revisions) != 2 || st.SyncResult.Revision != "" ||
		st.SyncResult.Revisions[0] == "" || st.SyncResult.Revisions[0] != st.SyncResult.Revisions[1] {
		t.Fatalf("syncResult = %+v (phase %s: %s), want two equal revisions and no single one", st.SyncResult, st.Phase, st.Message)
	}
	if !slices.Equal(st.SyncResult.RevisionList(), st.SyncResult.Revisions) {
		t.Errorf("RevisionList = %v", st.SyncResult.RevisionList())
	}
}

// Attack: many sources, each within the limits alone, cannot together
// exceed sync.limits.maxObjects or maxRenderBytes: each render gets what
// the earlier ones left.
func TestRenderApplicationSourcesShareTheLimits(t *testing.T) {
	m := newMultiSourceRepos(t)
	// What each rendering source holds alone.
	var sizes []int64
	for _, i := range []int{0, 2} {
		src := source.HelmDefaults(m.app, m.app.Spec.Sources[i])
		r, err := m.cache.Render(t.Context(), src, "", source.WithRefs(source.Ref{Name: "values", RepoURL: m.values, Revision: m.valuesSHA}))
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, r.Bytes)
	}
	if sizes[0] <= 0 || sizes[1] <= 0 {
		t.Fatalf("sizes %v, want each render's size counted", sizes)
	}
	for _, tc := range []struct {
		name   string
		limits source.Limits
		field  string
	}{
		{"objects", source.Limits{MaxObjects: 1}, source.FieldMaxObjects},
		// The chart's render reads less than the plain source's output.
		{"bytes", source.Limits{MaxRenderBytes: sizes[0] + sizes[1] - 1}, source.FieldMaxRenderBytes},
	} {
		t.Run("each source fits alone, not together: "+tc.name, func(t *testing.T) {
			c, err := source.New(source.Options{CacheDir: t.TempDir(), LocalRepositories: []string{filepath.Dir(m.charts)}, Limits: tc.limits})
			if err != nil {
				t.Fatal(err)
			}
			_, err = source.RenderApplication(t.Context(), c, m.app, v1alpha1.SyncOperation{})
			var le *source.LimitError
			if !errors.As(err, &le) || le.Field != tc.field || !strings.Contains(err.Error(), "spec.sources[2]") {
				t.Fatalf("err = %v, want a *LimitError naming %s for spec.sources[2]", err, tc.field)
			}
		})
	}
}

package syncer

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/syncer/source"
)

// denyAll is a fake kube-apiserver that answers 403 to everything (fakes
// deny by default) and records the impersonation headers of each request.
type denyAll struct {
	mu       sync.Mutex
	requests []string
	// serveDiscovery answers GET /version and API discovery (the core
	// group's configmaps and a stable.example.com/v1 CronTab), recording
	// those requests in discovery instead of requests.
	serveDiscovery bool
	discovery      []string
}

// fakeDiscovery are the discovery documents denyAll serves.
var fakeDiscovery = map[string]string{
	"/version":                    `{"major":"1","minor":"36","gitVersion":"v1.36.4"}`,
	"/api":                        `{"kind":"APIVersions","versions":["v1"]}`,
	"/api/v1":                     `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","namespaced":true,"kind":"ConfigMap","verbs":["get","list","create","patch","delete"]},{"name":"pods/log","namespaced":true,"kind":"Pod","verbs":["get"]}]}`,
	"/apis":                       `{"kind":"APIGroupList","groups":[{"name":"stable.example.com","versions":[{"groupVersion":"stable.example.com/v1","version":"v1"}],"preferredVersion":{"groupVersion":"stable.example.com/v1","version":"v1"}}]}`,
	"/apis/stable.example.com/v1": `{"kind":"APIResourceList","groupVersion":"stable.example.com/v1","resources":[{"name":"crontabs","namespaced":true,"kind":"CronTab","verbs":["get","list"]}]}`,
}

func (d *denyAll) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	if doc, ok := fakeDiscovery[r.URL.Path]; ok && d.serveDiscovery && r.Method == http.MethodGet {
		d.discovery = append(d.discovery, r.URL.Path+" as="+r.Header.Get("Impersonate-User"))
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(doc))
		return
	}
	d.requests = append(d.requests, r.Method+" "+r.URL.Path+" as="+r.Header.Get("Impersonate-User")+" groups="+strings.Join(r.Header.Values("Impersonate-Group"), ","))
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden by the fake","reason":"Forbidden","code":403}`))
}

type engineFixture struct {
	// repoDir is a local Git repository whose app/ holds one ConfigMap.
	repoDir string
	engine  *Engine
	fake    *denyAll
	project *v1alpha1.AppProject
}

func newEngineFixture(t *testing.T, imp ImpersonationSettings) *engineFixture {
	t.Helper()
	f := &engineFixture{repoDir: newAppRepo(t), fake: &denyAll{}}
	srv := httptest.NewServer(f.fake)
	t.Cleanup(srv.Close)
	e, err := NewEngine(EngineOptions{
		Clusters:      cluster.NewRegistry(cluster.InCluster(&rest.Config{Host: srv.URL})),
		Impersonation: imp,
		Source: source.Options{
			CacheDir: t.TempDir(),
			// The test repository's own directory: local repositories are
			// off unless listed.
			LocalRepositories: []string{f.repoDir},
		},
		Now: func() time.Time { return time.Unix(1700000000, 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.engine = e
	f.project = guestbookProject()
	f.project.Spec.DestinationServiceAccounts = []v1alpha1.ApplicationDestinationServiceAccount{
		{Server: InClusterServer, Namespace: "guestbook", DefaultServiceAccount: "guestbook-deployer"},
	}
	return f
}

// newAppRepo commits app/cm.yaml (one ConfigMap) to a new Git repository in
// t.TempDir() and returns its directory.
func newAppRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  k: v\n"
	if err := os.WriteFile(filepath.Join(dir, "app", "cm.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Add("app/cm.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Commit("app", &git.CommitOptions{Author: &object.Signature{Name: "test", Email: "test@example.com", When: time.Unix(1700000000, 0)}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (f *engineFixture) app(mutate ...func(*v1alpha1.Application)) *v1alpha1.Application {
	a := &v1alpha1.Application{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "guestbook"}, Spec: v1alpha1.ApplicationSpec{
		Project:     "guestbook",
		Source:      v1alpha1.ApplicationSource{RepoURL: f.repoDir, Path: "app"},
		Destination: v1alpha1.ApplicationDestination{Server: InClusterServer, Namespace: "guestbook"},
	}}
	for _, m := range mutate {
		if m != nil {
			m(a)
		}
	}
	return a
}

func TestRunEndsInErrorBeforeTouchingTheCluster(t *testing.T) {
	enforced := ImpersonationSettings{Enabled: true, Enforced: true}
	for _, tc := range []struct {
		name     string
		mutate   func(*v1alpha1.Application)
		project  func(*v1alpha1.AppProject)
		want     string
		revision bool
	}{
		{name: "a chart version that is no semver constraint", mutate: func(a *v1alpha1.Application) {
			a.Spec.Source = v1alpha1.ApplicationSource{RepoURL: "oci://registry.example.com/charts", Chart: "nginx", TargetRevision: "main"}
		}, want: `spec.source.targetRevision "main" of chart nginx is not a chart version or semver constraint`},
		{name: "an OCI chart repository the project does not permit", mutate: func(a *v1alpha1.Application) {
			a.Spec.Source = v1alpha1.ApplicationSource{RepoURL: "oci://registry.example.com/charts", Chart: "nginx", TargetRevision: "1.*"}
		}, project: func(p *v1alpha1.AppProject) { p.Spec.SourceRepos = []string{"https://registry.example.com/*"} },
			want: "application repo oci://registry.example.com/charts is not permitted in project 'guestbook'"},
		{name: "invalid Helm values", mutate: func(a *v1alpha1.Application) {
			a.Spec.Source.Helm = &v1alpha1.HelmSource{Parameters: []v1alpha1.HelmParameter{{Value: "x"}}}
		}, want: "spec.source.helm.parameters[0].name: Required value: name the value to set"},
		{name: "a repository the project does not permit", project: func(p *v1alpha1.AppProject) { p.Spec.SourceRepos = []string{"https://github.com/team/*"} },
			want: "is not permitted in project 'guestbook'"},
		{name: "a destination the project does not permit", mutate: func(a *v1alpha1.Application) { a.Spec.Destination.Namespace = "kube-system" },
			want: "application destination server 'https://kubernetes.default.svc' and namespace 'kube-system' do not match any of the allowed destinations in project 'guestbook'"},
		{name: "a destination cluster name that is not registered", mutate: func(a *v1alpha1.Application) {
			a.Spec.Destination.Server, a.Spec.Destination.Name = "", "prod"
		}, want: `cluster "prod" is not registered with deputy`},
		{name: "both a server and a name", mutate: func(a *v1alpha1.Application) { a.Spec.Destination.Name = "in-cluster" },
			want: "application destination can't have both name and server defined"},
		{name: "an Application of another project", mutate: func(a *v1alpha1.Application) { a.Spec.Project = "other" },
			want: `belongs to project "other"`},
		{name: "enforced impersonation with no matching entry (upstream's message)", mutate: func(a *v1alpha1.Application) { a.Spec.Destination.Namespace = "guestbook-dev" },
			want: "no matching service account found for destination server https://kubernetes.default.svc and namespace guestbook-dev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newEngineFixture(t, enforced)
			if tc.project != nil {
				tc.project(f.project)
			}
			var phases []string
			st := f.engine.Run(t.Context(), Request{Application: f.app(tc.mutate), Project: f.project}, func(s *v1alpha1.OperationState, r *v1alpha1.ResourceResult) {
				phases = append(phases, s.Phase)
			})
			if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, tc.want) {
				t.Errorf("phase %s, message %q; want Error containing %q", st.Phase, st.Message, tc.want)
			}
			if st.FinishedAt == nil || st.StartedAt.IsZero() {
				t.Errorf("times not set: %+v", st)
			}
			if got := st.SyncResult != nil && st.SyncResult.Revision != ""; got != tc.revision {
				t.Errorf("revision recorded = %t, want %t", got, tc.revision)
			}
			if phases[len(phases)-1] != v1alpha1.OperationError {
				t.Errorf("progress phases %v, want the final Error last", phases)
			}
			if len(f.fake.requests) != 0 {
				t.Errorf("the cluster was contacted: %v", f.fake.requests)
			}
		})
	}
}

// Every request after the derivation carries the ServiceAccount's username
// and no group (constrained impersonation impersonates a ServiceAccount by
// name); only the SelfSubjectReview naming the impersonator and the
// ServiceAccount existence check are the controller's own.
func TestRunImpersonatesTheDerivedServiceAccount(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	st := f.engine.Run(t.Context(), Request{Application: f.app(), Project: f.project}, nil)
	if st.Identity != "system:serviceaccount:guestbook:guestbook-deployer" {
		t.Errorf("identity = %q", st.Identity)
	}
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "API discovery on https://kubernetes.default.svc as system:serviceaccount:guestbook:guestbook-deployer failed") {
		t.Errorf("phase %s: %s", st.Phase, st.Message)
	}
	if len(f.fake.requests) == 0 {
		t.Fatal("no requests")
	}
	for _, r := range f.fake.requests {
		own := strings.HasPrefix(r, "POST /apis/authentication.k8s.io/v1/selfsubjectreviews ")
		switch {
		case own && !strings.HasSuffix(r, " as= groups="):
			t.Errorf("the controller's SelfSubjectReview is impersonated: %s", r)
		case !own && !strings.HasSuffix(r, " as=system:serviceaccount:guestbook:guestbook-deployer groups="):
			t.Errorf("request not made as the ServiceAccount alone: %s", r)
		}
	}
}

func TestRunWithoutImpersonationSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name string
		imp  ImpersonationSettings
		dest string
		want string
	}{
		{"not enforced and no matching entry", ImpersonationSettings{Enabled: true, Enforced: false}, "guestbook-dev", ControllerIdentity},
		{"impersonation disabled", ImpersonationSettings{}, "guestbook", ControllerIdentityImpersonationDisabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newEngineFixture(t, tc.imp)
			st := f.engine.Run(t.Context(), Request{Application: f.app(func(a *v1alpha1.Application) { a.Spec.Destination.Namespace = tc.dest }), Project: f.project}, nil)
			if st.Identity != tc.want {
				t.Errorf("identity = %q, want %q", st.Identity, tc.want)
			}
			for _, r := range f.fake.requests {
				if !strings.HasSuffix(r, " as= groups=") {
					t.Errorf("impersonated although no ServiceAccount applies: %s", r)
				}
			}
		})
	}
}

func TestRunNeverPanicsAndAlwaysEnds(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	calls := 0
	st := f.engine.Run(t.Context(), Request{Application: f.app(), Project: f.project}, func(*v1alpha1.OperationState, *v1alpha1.ResourceResult) {
		calls++
		panic("progress sinks must not take the engine down")
	})
	if st == nil || st.Phase == v1alpha1.OperationRunning || calls == 0 {
		t.Errorf("state %+v after %d progress calls", st, calls)
	}
	if st := f.engine.Run(t.Context(), Request{}, nil); st == nil || st.Phase != v1alpha1.OperationError {
		t.Errorf("an empty request: %+v", st)
	}
	if st := f.engine.DeleteResources(t.Context(), nil, nil, DeleteOptions{}); st == nil || st.Phase != v1alpha1.OperationError {
		t.Errorf("deleting nothing: %+v", st)
	}
}

func TestDeleteResourcesEnforcesImpersonation(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	st := f.engine.DeleteResources(t.Context(), f.app(func(a *v1alpha1.Application) { a.Spec.Destination.Namespace = "guestbook-dev" }), f.project, DeleteOptions{})
	if st.Phase != v1alpha1.OperationError || st.Message != "no matching service account found for destination server https://kubernetes.default.svc and namespace guestbook-dev" {
		t.Errorf("phase %s: %s", st.Phase, st.Message)
	}
	if len(f.fake.requests) != 0 {
		t.Errorf("the cluster was contacted: %v", f.fake.requests)
	}
}

func TestNewEngineChecksItsOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts EngineOptions
		want string
	}{
		{"no clusters", EngineOptions{Source: source.Options{CacheDir: t.TempDir()}}, "Clusters is required"},
		{"no cache", EngineOptions{Clusters: cluster.NewRegistry()}, "CacheDir is required"},
		{"a credential without files", EngineOptions{Clusters: cluster.NewRegistry(), Source: source.Options{CacheDir: t.TempDir(), RepoCredentials: []source.RepoCredential{{URL: "https://x"}}}}, "needs usernameFile and passwordFile"},
		{"a Secret without a reader", EngineOptions{Clusters: cluster.NewRegistry(), Source: source.Options{CacheDir: t.TempDir(), RepoCredentials: []source.RepoCredential{{URL: "https://x", Secret: &source.SecretRef{Name: "s"}}}}}, "Options.Secrets is nil"},
	} {
		if _, err := NewEngine(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	r := func(status string) *v1alpha1.ResourceResult { return &v1alpha1.ResourceResult{Status: status} }
	phase, msg := summarize([]*v1alpha1.ResourceResult{r("Synced"), r("Synced"), r("Pruned")}, "system:serviceaccount:a:b", false, false)
	if phase != v1alpha1.OperationSucceeded || msg != "successfully synced 2 resources, pruned 1, as system:serviceaccount:a:b" {
		t.Errorf("%s: %s", phase, msg)
	}
	phase, msg = summarize([]*v1alpha1.ResourceResult{r("Synced"), r("SyncFailed"), r("PruneSkipped")}, ControllerIdentity, true, false)
	if phase != v1alpha1.OperationFailed || msg != "dry run: one or more resources failed: 1 of 3 failed, 1 to prune skipped, as the controller identity (impersonation not enforced)" {
		t.Errorf("%s: %s", phase, msg)
	}
	phase, msg = summarize([]*v1alpha1.ResourceResult{r("Synced")}, ControllerIdentityImpersonationDisabled, false, false)
	if phase != v1alpha1.OperationSucceeded || msg != "successfully synced 1 resources, as the controller identity (impersonation disabled)" {
		t.Errorf("%s: %s", phase, msg)
	}
}

// An operation that reaches sync.limits.operationTimeout ends in Error
// naming it, and frees its worker.
func TestOperationTimeout(t *testing.T) {
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hang.Close)
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	f.fake.serveDiscovery = true
	f.engine.opts.Source.Limits.OperationTimeout = 500 * time.Millisecond
	app := f.app(func(a *v1alpha1.Application) { a.Spec.Source.RepoURL = hang.URL + "/team/app.git" })
	start := time.Now()
	st := f.engine.Run(t.Context(), Request{Application: app, Project: f.project}, nil)
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, source.FieldOperationTimeout) {
		t.Errorf("phase %s, message %q; want Error naming %s", st.Phase, st.Message, source.FieldOperationTimeout)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the operation took %s", d)
	}
}

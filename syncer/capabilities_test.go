package syncer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"deputy.dev/deputy/policy/v1alpha1"
)

// commitFiles commits files (path → content) to the fixture's repository.
func (f *engineFixture) commitFiles(t *testing.T, files map[string]string) {
	t.Helper()
	repo, err := git.PlainOpen(f.repoDir)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.MkdirAll(filepath.Join(f.repoDir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(f.repoDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := wt.Add(name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := wt.Commit("files", &git.CommitOptions{Author: &object.Signature{Name: "test", Email: "test@example.com", When: time.Unix(1700000000, 0)}}); err != nil {
		t.Fatal(err)
	}
}

// A chart sees the destination's .Capabilities as the derived
// ServiceAccount discovers them (Argo CD passes the destination cluster's
// version and API versions to helm template), unless spec.source.helm sets
// kubeVersion and apiVersions, which replace them. The chart reports what it
// saw through `fail`, so the operation's message carries it.
func TestChartsSeeTheDestinationsCapabilities(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	f.fake.serveDiscovery = true
	f.commitFiles(t, map[string]string{
		"caps/Chart.yaml": "apiVersion: v2\nname: caps\nversion: 0.1.0\n",
		"caps/templates/report.yaml": `{{ fail (printf "kube=%s crontab=%t crontab-gv=%t pods-log=%t custom=%t" .Capabilities.KubeVersion.Version` +
			` (.Capabilities.APIVersions.Has "stable.example.com/v1/CronTab") (.Capabilities.APIVersions.Has "stable.example.com/v1")` +
			` (.Capabilities.APIVersions.Has "v1/Pod") (.Capabilities.APIVersions.Has "custom.example.com/v2")) }}`,
	})
	for _, tc := range []struct {
		name string
		helm *v1alpha1.HelmSource
		want string
	}{
		{"from the destination's discovery", nil, "kube=v1.36.4 crontab=true crontab-gv=true pods-log=false custom=false"},
		{"spec.source.helm's kubeVersion and apiVersions replace them",
			&v1alpha1.HelmSource{KubeVersion: "1.30.2", APIVersions: []string{"custom.example.com/v2"}},
			"kube=v1.30.2 crontab=false crontab-gv=false pods-log=false custom=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.fake.discovery = nil
			app := f.app(func(a *v1alpha1.Application) { a.Spec.Source.Path, a.Spec.Source.Helm = "caps", tc.helm })
			st := f.engine.Run(t.Context(), Request{Application: app, Project: f.project}, nil)
			if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, tc.want) {
				t.Fatalf("phase %s: %s; want the chart to report %q", st.Phase, st.Message, tc.want)
			}
			if !slices.Contains(f.fake.discovery, "/version as=system:serviceaccount:guestbook:guestbook-deployer") {
				t.Errorf("the version was not read as the derived ServiceAccount: %v", f.fake.discovery)
			}
			if app.Spec.Source.Helm != tc.helm {
				t.Error("the Application's spec.source.helm was replaced")
			}
		})
	}
}

// A plain-manifest source renders with the destination's capabilities
// passed along (they configure no chart): the operation goes on to the
// preflight, which the fake denies.
func TestCapabilitiesDoNotMakeASourceAChart(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	f.fake.serveDiscovery = true
	st := f.engine.Run(t.Context(), Request{Application: f.app(), Project: f.project}, nil)
	if st.Phase != v1alpha1.OperationError || !strings.HasPrefix(st.Message, "preflight: ") {
		t.Errorf("phase %s: %s; want the preflight's error", st.Phase, st.Message)
	}
}

// A render error ends the operation in Error with the revision recorded,
// after reading only discovery (as the derived ServiceAccount) and the
// controller's own name: no object is read or written.
func TestRenderErrorReadsOnlyDiscovery(t *testing.T) {
	f := newEngineFixture(t, ImpersonationSettings{Enabled: true, Enforced: true})
	f.fake.serveDiscovery = true
	st := f.engine.Run(t.Context(), Request{Application: f.app(func(a *v1alpha1.Application) { a.Spec.Source.Path = "missing" }), Project: f.project}, nil)
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, `failed to render the manifests: path "missing" does not exist`) {
		t.Errorf("phase %s: %s", st.Phase, st.Message)
	}
	if st.SyncResult == nil || st.SyncResult.Revision == "" {
		t.Error("the revision was not recorded")
	}
	if len(f.fake.requests) != 1 || !strings.HasPrefix(f.fake.requests[0], "POST /apis/authentication.k8s.io/v1/selfsubjectreviews") {
		t.Errorf("requests beyond discovery and the controller's name: %v", f.fake.requests)
	}
	for _, d := range f.fake.discovery {
		if !strings.HasSuffix(d, " as=system:serviceaccount:guestbook:guestbook-deployer") {
			t.Errorf("discovery not made as the derived ServiceAccount: %s", d)
		}
	}
}

//go:build envtest

package apps_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/clustersource"
	"deputy.dev/deputy/policy/v1alpha1"
)

// Issue 12 item 6: an operation recorded by hand (docs/install.md §6,
// `kubectl patch application … {"operation":{"sync":{"prune":false},…}}`)
// runs, succeeds, and is removed, however it is spelled: explicit false or
// empty values, no initiatedBy, fields deputy does not know. Otherwise every
// later sync is 409 and the push webhook skips the Application.
func TestAPIServerControllerClearsEverySpellingOfAnOperation(t *testing.T) {
	f := newCtlFixture(t, "spellings")
	a := f.leader("a", 5*time.Second)
	f.create("app", a)
	for _, tc := range []struct {
		name  string
		patch string
		// editSpec changes the spec while the operation runs (the
		// generation moves on: the removal compares the operation itself).
		editSpec bool
	}{
		{"prune false, as docs/install.md writes it", `{"operation":{"sync":{"prune":false},"initiatedBy":{"username":"alice"}}}`, false},
		{"dryRun false and no initiatedBy", `{"operation":{"sync":{"dryRun":false}}}`, false},
		{"an empty revision and an empty initiatedBy", `{"operation":{"sync":{"revision":""},"initiatedBy":{}}}`, false},
		{"every field explicit", `{"operation":{"sync":{"revision":"","prune":false,"dryRun":false},"initiatedBy":{"username":"alice","automated":false}}}`, false},
		{"fields deputy does not know (Argo CD's)", `{"operation":{"sync":{"prune":false,"syncStrategy":{"hook":{}},"syncOptions":["ServerSideApply=true"]},"initiatedBy":{"username":"alice"},"info":[{"name":"reason","value":"test"}],"retry":{"limit":2}}}`, false},
		{"prune false, with the spec edited while it runs", `{"operation":{"sync":{"prune":false},"initiatedBy":{"username":"alice"}}}`, true},
		{"explicit values, with the spec edited while it runs", `{"operation":{"sync":{"revision":"","dryRun":false},"initiatedBy":{"automated":false}},"unknown":"x"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.dyn.Namespace(f.ns).Patch(t.Context(), "app", types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			run := f.runner.next(t, "the patched operation")
			if tc.editSpec {
				edit := `{"spec":{"source":{"targetRevision":"edited-` + time.Now().Format("150405.000000") + `"}}}`
				if _, err := f.dyn.Namespace(f.ns).Patch(t.Context(), "app", types.MergePatchType, []byte(edit), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			run.succeed()
			if st := f.waitDone("app"); st.Phase != v1alpha1.OperationSucceeded {
				t.Errorf("persisted state = %s %q, want Succeeded", st.Phase, st.Message)
			}
			// The Application takes the next sync: no 409.
			f.waitFor("a to see the operation removed", func() bool { app, _ := a.Application(f.ns, "app"); return app != nil && app.Operation == nil })
			f.sync(a, "app", "next")
			f.runner.next(t, "the next sync").succeed()
			f.waitDone("app")
		})
	}
}

// Issue 12 item 6: a successful sync that left objects prune would delete
// (results PruneSkipped) leaves the Application OutOfSync, not Synced.
func TestAPIServerControllerObjectsPruneWouldDeleteMakeTheApplicationOutOfSync(t *testing.T) {
	f := newCtlFixture(t, "outofsync")
	a := f.leader("a", 5*time.Second)
	f.create("app", a)

	f.sync(a, "app", "alice")
	f.runner.next(t, "a sync with nothing left over").succeed()
	if app := f.waitDoneApp("app"); app.Status.Sync.Status != v1alpha1.SyncStatusCodeSynced {
		t.Errorf("status.sync = %+v, want Synced", app.Status.Sync)
	}

	f.runner.mu.Lock()
	f.runner.results = []*v1alpha1.ResourceResult{
		{Version: "v1", Kind: "ConfigMap", Namespace: "d", Name: "kept", Status: v1alpha1.ResultCodeSynced, Message: "unchanged"},
		{Version: "v1", Kind: "ConfigMap", Namespace: "d", Name: "orphan", Status: v1alpha1.ResultCodePruneSkipped, Message: "would be pruned (prune is off)"},
	}
	f.runner.mu.Unlock()
	f.sync(a, "app", "bob")
	f.runner.next(t, "a sync that leaves an orphan").succeed()
	app := f.waitDoneApp("app")
	if app.Status.Sync.Status != v1alpha1.SyncStatusCodeOutOfSync || app.Status.Sync.Revision != "abc" {
		t.Errorf("status.sync = %+v, want OutOfSync at abc", app.Status.Sync)
	}
	if skipped := v1alpha1.PruneSkipped(app.Status.OperationState); len(skipped) != 1 || skipped[0].Name != "orphan" {
		t.Errorf("PruneSkipped results %v, want the orphan", skipped)
	}
}

// waitDoneApp is waitDone returning the whole Application.
func (f *ctlFixture) waitDoneApp(name string) *v1alpha1.Application {
	f.t.Helper()
	f.waitDone(name)
	return f.get(name)
}

// A graceful stop of the leader releases the Lease (no holder) and says so;
// a release kube-apiserver refuses (deputy's own webhook stopped answering,
// say) is logged as a failure, never as a release.
func TestAPIServerControllerSaysWhetherItReleasedTheLease(t *testing.T) {
	for _, tc := range []struct {
		name        string
		refuse      bool
		wantLog     string
		wantHolder  func(string) bool
		notInLog    string
		description string
	}{
		{name: "a release that succeeds", wantLog: "released the sync Lease", notInLog: "failed to release",
			wantHolder: func(h string) bool { return h == "" }, description: "no holder"},
		{name: "a release kube-apiserver refuses", refuse: true, wantLog: "failed to release the sync Lease", notInLog: "released the sync Lease;",
			wantHolder: func(h string) bool { return h == "a" }, description: "still a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCtlFixture(t, "release-"+map[bool]string{false: "ok", true: "refused"}[tc.refuse])
			var refuse atomic.Bool
			cfg := rest.CopyConfig(f.cfg)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(r *http.Request) (*http.Response, error) {
					if refuse.Load() && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/leases/") {
						return nil, errors.New("refused by the test: the authorization webhook is down")
					}
					return rt.RoundTrip(r)
				})
			})
			a := f.start(f.newController("a", time.Second, cfg))
			f.waitFor("a to lead", a.IsLeader)
			refuse.Store(tc.refuse)
			a.stop()
			select {
			case <-a.done:
			case <-time.After(ctlWait):
				t.Fatal("Run did not return")
			}
			l, err := f.kube.CoordinationV1().Leases(ctlLease.Namespace).Get(t.Context(), f.lease, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			holder := ""
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			if !tc.wantHolder(holder) {
				t.Errorf("Lease holder %q after the stop, want %s", holder, tc.description)
			}
			logs := f.logs.String()
			if !strings.Contains(logs, tc.wantLog) || strings.Contains(logs, tc.notInLog) {
				t.Errorf("logs do not say %q (or say %q):\n%s", tc.wantLog, tc.notInLog, logs)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Issue 12 item 4: without the Application CRD the controller does not
// campaign (no Lease, no error logged) and answers that there are no
// Applications; when the CRD is installed it starts within seconds. The
// cluster source's discovery poll is an hour here, so only its CRD watch can
// explain the start.
func TestAPIServerControllerWaitsForTheApplicationCRD(t *testing.T) {
	f := newCtlFixture(t, "crd-later")
	crdPath := filepath.Join("..", "manifests", "crds", "deputy.dev_applications.yaml")
	deleteCRD(t, f.cfg, "applications.deputy.dev")
	t.Cleanup(func() { installCRD(t, f.cfg, crdPath) }) // for the other tests, whatever happens here

	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var c atomic.Pointer[apps.Controller]
	source, err := clustersource.New(rest.CopyConfig(f.cfg), clustersource.Options{Logger: log.With("source", "cluster"),
		DiscoveryInterval: time.Hour, Resources: []schema.GroupVersionResource{apps.ApplicationsResource},
		OnServedChange: func() {
			if ctl := c.Load(); ctl != nil {
				ctl.ApplicationsServedChanged()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sourceDone := make(chan struct{})
	go func() { defer close(sourceDone); _ = source.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-sourceDone })

	le := ctlLease
	le.Name, le.Identity = f.lease, "a"
	ctl, err := apps.NewController(apps.ControllerOptions{
		Config: rest.CopyConfig(f.cfg), Runner: f.runner, Revisions: ctlRevisions{},
		Projects: func(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
			return &v1alpha1.AppProject{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: app.Spec.Project}}, nil
		},
		ReconcilePeriod: time.Hour, ShutdownGrace: time.Second, Namespaces: []string{f.ns}, LeaderElection: le,
		ApplicationsServed: func() (bool, bool) { return source.Served(apps.ApplicationsResource) },
		Logger:             log.With("replica", "a"),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Store(ctl)
	r := f.start(ctl)

	f.waitFor("the source to know the Application CRD is not served", func() bool {
		served, known := source.Served(apps.ApplicationsResource)
		return known && !served
	})
	time.Sleep(4 * ctlLease.RetryPeriod) // what a campaign would have done by now
	if _, err := f.kube.CoordinationV1().Leases(ctlLease.Namespace).Get(t.Context(), f.lease, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Lease exists (or cannot be read: %v) although the Application CRD is not served", err)
	}
	if r.IsLeader() {
		t.Error("the controller leads without the Application CRD")
	}
	if app, err := r.Application(f.ns, "app"); app != nil || err != nil {
		t.Errorf("Application() = %v, %v; want nil, nil (no Applications without the CRD)", app, err)
	}
	if list, err := r.List(); len(list) != 0 || err != nil {
		t.Errorf("List() = %v, %v; want none", list, err)
	}
	if logs := f.logs.String(); strings.Contains(logs, "level=ERROR") || strings.Contains(logs, "level=WARN") {
		t.Errorf("errors or warnings logged without the Application CRD:\n%s", logs)
	}

	installCRD(t, f.cfg, crdPath)
	f.waitFor("the controller to lead once the CRD is installed (only the CRD watch can tell it: the poll is 1h)", r.IsLeader)
	f.create("app", r)
	f.sync(r, "app", "alice")
	f.runner.next(t, "the first sync after the CRD appeared").succeed()
	f.waitDone("app")
	if logs := f.logs.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("errors logged:\n%s", logs)
	}
}

// Issue 12 item 4: an AppProject CRD installed after deputy (Argo CD's,
// with real Argo CD installed later) counts within seconds, not on the next
// discovery poll (an hour here, so only the CRD watch can explain it).
func TestAPIServerClusterSourceSeesAnAppProjectCRDInstalledLater(t *testing.T) {
	f := newCtlFixture(t, "argocd-later")
	argo := v1alpha1.ArgoCDGroupVersion.WithResource("appprojects")
	source, err := clustersource.New(rest.CopyConfig(f.cfg), clustersource.Options{
		Logger: slog.New(slog.NewTextHandler(f.logs, nil)), DiscoveryInterval: time.Hour, Namespaces: []string{f.ns}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = source.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f.waitFor("the source to sync without Argo CD's AppProject CRD", func() bool {
		served, known := source.Served(argo)
		return known && !served && source.Current().Synced
	})

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "appprojects.argoproj.io.yaml"), []byte(argoAppProjectCRD), 0o600); err != nil {
		t.Fatal(err)
	}
	installCRD(t, f.cfg, dir)
	t.Cleanup(func() { deleteCRD(t, f.cfg, "appprojects.argoproj.io") })
	project := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"namespace": f.ns, "name": "guestbook"},
		"spec": map[string]any{"sourceRepos": []any{"*"},
			"destinations": []any{map[string]any{"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}},
	}}
	if _, err := dynamic.NewForConfigOrDie(f.cfg).Resource(argo).Namespace(f.ns).Create(t.Context(), project, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("the Argo CD AppProject to be in the cluster state", func() bool {
		for _, p := range source.Current().Projects {
			if p.Group == argo.Group && p.Object.Namespace == f.ns && p.Object.Name == "guestbook" {
				return true
			}
		}
		return false
	})
}

// argoAppProjectCRD is a minimal argoproj.io AppProject CRD (what matters
// here is that it is installed after deputy started).
const argoAppProjectCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: appprojects.argoproj.io
spec:
  group: argoproj.io
  names: {kind: AppProject, listKind: AppProjectList, plural: appprojects, singular: appproject}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// installCRD installs the CRDs at path (a file or directory) and waits until
// they are served.
func installCRD(t *testing.T, cfg *rest.Config, path string) {
	t.Helper()
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{path}, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("installing %s: %v", path, err)
	}
}

// deleteCRD deletes the CRD name (and so its objects) and waits until it is
// gone.
func deleteCRD(t *testing.T, cfg *rest.Config, name string) {
	t.Helper()
	crds := apiextensionsclient.NewForConfigOrDie(cfg).ApiextensionsV1().CustomResourceDefinitions()
	if err := crds.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(ctlWait)
	for {
		_, err := crds.Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s still exists: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package clustersource_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/discovery"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/clustersource"
)

var (
	argoGVR   = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}
	deputyGVR = schema.GroupVersionResource{Group: "deputy.dev", Version: "v1alpha1", Resource: "appprojects"}
)

// clusterDiscovery is a fake discovery client that knows only which
// AppProject groups are installed; safe to change while a source runs.
type clusterDiscovery struct {
	discovery.ServerResourcesInterfaceWithContext // nil: other methods are not used

	mu        sync.Mutex
	installed map[string]bool // group version -> installed
	err       error
}

func (d *clusterDiscovery) set(groupVersion string, installed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.installed[groupVersion] = installed
}

func (d *clusterDiscovery) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

// ServerGroupsAndResourcesWithContext serves the installed AppProject
// resources as the whole discovery (the resource catalog's input).
func (d *clusterDiscovery) ServerGroupsAndResourcesWithContext(ctx context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	d.mu.Lock()
	var gvs []string
	for gv, ok := range d.installed {
		if ok {
			gvs = append(gvs, gv)
		}
	}
	err := d.err
	d.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	var lists []*metav1.APIResourceList
	for _, gv := range gvs {
		l, err := d.ServerResourcesForGroupVersionWithContext(ctx, gv)
		if err != nil {
			return nil, nil, err
		}
		lists = append(lists, l)
	}
	return nil, lists, nil
}

func (d *clusterDiscovery) ServerResourcesForGroupVersionWithContext(_ context.Context, gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return nil, d.err
	}
	if !d.installed[gv] {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
	}
	return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{
		{Name: "appprojects", Namespaced: true, Kind: "AppProject", Verbs: metav1.Verbs{"get", "list", "watch"}},
	}}, nil
}

// clusterFixture is a ClusterSource over fake clientsets.
type clusterFixture struct {
	kube  *kubefake.Clientset
	dyn   *dynamicfake.FakeDynamicClient
	disco *clusterDiscovery
	src   *clustersource.Source
	logs  *syncBuffer
	swaps atomic.Int64
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// newClusterFixture builds the fakes with objs (RBAC objects go to the
// clientset, *unstructured.Unstructured AppProjects to the dynamic client) and
// both AppProject CRDs installed.
func newClusterFixture(t *testing.T, opts clustersource.Options, objs ...runtime.Object) *clusterFixture {
	t.Helper()
	var kubeObjs, dynObjs []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*unstructured.Unstructured); ok {
			dynObjs = append(dynObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	f := &clusterFixture{
		kube: kubefake.NewClientset(kubeObjs...),
		dyn: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{argoGVR: "AppProjectList", deputyGVR: "AppProjectList"}, dynObjs...),
		disco: &clusterDiscovery{installed: map[string]bool{"argoproj.io/v1alpha1": true, "deputy.dev/v1alpha1": true}},
		logs:  &syncBuffer{},
	}
	opts.Logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	onChange := opts.OnChange
	opts.OnChange = func(s *policy.ClusterState) {
		f.swaps.Add(1)
		if onChange != nil {
			onChange(s)
		}
	}
	src, err := clustersource.NewForClients(clustersource.Clients{Kube: f.kube, Dynamic: f.dyn, Discovery: f.disco}, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.src = src
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("source logs:\n%s", f.logs.String())
		}
	})
	return f
}

// run starts the source; the test's cleanup stops it and waits for Run to
// return.
func (f *clusterFixture) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitSynced waits for a synced state.
func (f *clusterFixture) waitSynced(t *testing.T) *policy.ClusterState {
	t.Helper()
	clusterWaitFor(t, "the source to sync", func() bool {
		s := f.src.Current()
		return s != nil && s.Synced
	})
	return f.src.Current()
}

// clusterWaitFor polls cond until it holds or the deadline passes; it never
// asserts how long that took. It returns how long it waited, for logs.
func clusterWaitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func clusterProject(group, ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/v1alpha1",
		"kind":       "AppProject",
		"metadata":   map[string]any{"namespace": ns, "name": name},
		"spec":       spec,
	}}
}

// saSpec is a project spec deriving sa for destination namespace ns.
func saSpec(ns, sa string) map[string]any {
	return map[string]any{
		"destinations": []any{map[string]any{"server": "https://kubernetes.default.svc", "namespace": ns}},
		"destinationServiceAccounts": []any{map[string]any{
			"server": "https://kubernetes.default.svc", "namespace": ns, "defaultServiceAccount": sa,
		}},
	}
}

// projectKeys lists "group ns/name" of the state's projects.
func projectKeys(s *policy.ClusterState) []string {
	var keys []string
	for _, p := range s.Projects {
		keys = append(keys, p.Group+" "+p.Object.Namespace+"/"+p.Object.Name)
	}
	return keys
}

// projectSA returns the first defaultServiceAccount of the named project, "" if absent.
func projectSA(s *policy.ClusterState, group, ns, name string) string {
	for _, p := range s.Projects {
		if p.Group == group && p.Object.Namespace == ns && p.Object.Name == name {
			if sas := p.Object.Spec.DestinationServiceAccounts; len(sas) > 0 {
				return sas[0].DefaultServiceAccount
			}
			return "<none>"
		}
	}
	return ""
}

// bindingsFor lists the bindings (name[/ns]) that name the user in namespace ns.
func bindingsFor(s *policy.ClusterState, name string, groups []string, ns string) []string {
	var out []string
	s.RBAC.VisitBindings(&user.DefaultInfo{Name: name, Groups: groups}, ns, func(b *policy.Binding, _ int) bool {
		id := b.Name
		if b.Namespace != "" {
			id += "/" + b.Namespace
		}
		out = append(out, id)
		return true
	})
	return out
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func crb(name, role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: subjects}
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

var podReader = rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}

func TestClusterSourceSync(t *testing.T) {
	t.Run("the state is unsynced until every informer has listed, and readiness names the failing list", func(t *testing.T) {
		f := newClusterFixture(t, clustersource.Options{},
			clusterRole("reader", podReader), crb("alice-reads", "reader", userSubject("alice")))
		var failing atomic.Bool
		failing.Store(true)
		f.kube.PrependReactor("list", "clusterrolebindings", func(k8stesting.Action) (bool, runtime.Object, error) {
			if failing.Load() {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}, "", errors.New("deputy may not list them"))
			}
			return false, nil, nil
		})
		if f.src.Current() != nil {
			t.Fatal("Current() before Run must be nil")
		}
		f.run(t)
		clusterWaitFor(t, "the list failure to be reported", func() bool { return f.src.Status().LastError != nil })
		st := f.src.Status()
		if st.Synced || st.Ready() {
			t.Errorf("status = %+v, want not synced and not ready", st)
		}
		if !strings.Contains(st.LastError.Error(), "failed to list rbac.authorization.k8s.io/v1 clusterrolebindings") ||
			!strings.Contains(st.LastError.Error(), "deputy may not list them") {
			t.Errorf("LastError = %q, want the informer and the cause", st.LastError)
		}
		if s := f.src.Current(); s == nil || s.Synced || len(bindingsFor(s, "alice", nil, "")) != 0 {
			t.Fatalf("Current() = %+v, want an empty, unsynced state", s)
		}

		failing.Store(false) // the reflector retries after its backoff (~1s)
		s := f.waitSynced(t)
		if got := bindingsFor(s, "alice", nil, ""); !slices.Equal(got, []string{"alice-reads"}) {
			t.Errorf("bindings of alice = %v", got)
		}
		clusterWaitFor(t, "the failure to clear", func() bool { return f.src.Status().LastError == nil })
		st = f.src.Status()
		if !st.Ready() || st.ClusterRoles != 1 || st.ClusterRoleBindings != 1 || st.LastBuild.IsZero() {
			t.Errorf("status = %+v, want ready with 1 ClusterRole and 1 ClusterRoleBinding", st)
		}
		if !strings.Contains(f.logs.String(), "cluster policy synced") {
			t.Errorf("no info log on sync:\n%s", f.logs.String())
		}
	})

	t.Run("after sync the RBAC objects and the projects of both groups are indexed", func(t *testing.T) {
		f := newClusterFixture(t, clustersource.Options{},
			clusterRole("reader", podReader),
			// An aggregating ClusterRole is read as the cluster has it (its
			// rules are the controller-manager's result), never re-aggregated.
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agg"},
				AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"x": "y"}}}},
				Rules:           []rbacv1.PolicyRule{podReader}},
			crb("devs-read", "reader", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "devs"}),
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edit"}, Rules: []rbacv1.PolicyRule{podReader}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "bob-edits"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "edit"},
				Subjects: []rbacv1.Subject{userSubject("bob")}},
			clusterProject("argoproj.io", "argocd", "b-team", saSpec("team-b", "deployer")),
			clusterProject("argoproj.io", "argocd", "a-team", saSpec("team-a", "deployer")),
			clusterProject("deputy.dev", "deputy-system", "platform", saSpec("platform", "sync")),
		)
		f.run(t)
		s := f.waitSynced(t)
		if got := bindingsFor(s, "carol", []string{"devs"}, "team-a"); !slices.Equal(got, []string{"devs-read"}) {
			t.Errorf("bindings of group devs = %v", got)
		}
		if got := bindingsFor(s, "bob", nil, "team-a"); !slices.Equal(got, []string{"bob-edits/team-a"}) {
			t.Errorf("bindings of bob in team-a = %v", got)
		}
		if got := bindingsFor(s, "bob", nil, "team-b"); len(got) != 0 {
			t.Errorf("bindings of bob in team-b = %v, want none", got)
		}
		if r := s.RBAC.ClusterRole("agg"); r == nil || len(r.Rules) != 1 {
			t.Errorf("aggregating ClusterRole = %+v, want its rules as stored", r)
		}
		want := []string{"argoproj.io argocd/a-team", "argoproj.io argocd/b-team", "deputy.dev deputy-system/platform"}
		if got := projectKeys(s); !slices.Equal(got, want) {
			t.Errorf("projects = %v, want %v (argoproj.io first, then by namespace and name)", got, want)
		}
		st := f.src.Status()
		if st.Roles != 1 || st.RoleBindings != 1 || st.ClusterRoles != 2 || st.Projects != 3 || st.SkippedProjects != 0 || len(st.AbsentGroups) != 0 {
			t.Errorf("status = %+v", st)
		}
	})
}

func TestClusterSourceChanges(t *testing.T) {
	ctx := t.Context()
	f := newClusterFixture(t, clustersource.Options{},
		clusterRole("reader", podReader),
		clusterProject("argoproj.io", "argocd", "guestbook", saSpec("guestbook", "deployer")),
		clusterProject("argoproj.io", "argocd", "other", saSpec("other", "deployer")),
	)
	f.run(t)
	f.waitSynced(t)
	projects := f.dyn.Resource(argoGVR).Namespace("argocd")

	t.Run("an AppProject update is reflected", func(t *testing.T) {
		u, err := projects.Get(ctx, "guestbook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.Object["spec"] = saSpec("guestbook", "guestbook-sync")
		if _, err := projects.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		took := clusterWaitFor(t, "the new ServiceAccount", func() bool {
			return projectSA(f.src.Current(), "argoproj.io", "argocd", "guestbook") == "guestbook-sync"
		})
		t.Logf("update visible after %s", took)
	})

	t.Run("a deleted AppProject disappears and the others stay", func(t *testing.T) {
		if err := projects.Delete(ctx, "guestbook", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		took := clusterWaitFor(t, "the project to disappear", func() bool {
			return projectSA(f.src.Current(), "argoproj.io", "argocd", "guestbook") == ""
		})
		t.Logf("deletion visible after %s", took)
		if got := projectKeys(f.src.Current()); !slices.Equal(got, []string{"argoproj.io argocd/other"}) {
			t.Errorf("projects = %v", got)
		}
	})

	t.Run("a new ClusterRoleBinding is indexed", func(t *testing.T) {
		if _, err := f.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb("dave-reads", "reader", userSubject("dave")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		took := clusterWaitFor(t, "the binding", func() bool {
			return len(bindingsFor(f.src.Current(), "dave", nil, "")) == 1
		})
		t.Logf("binding visible after %s", took)
	})

	t.Run("a burst of changes is coalesced into few rebuilds", func(t *testing.T) {
		before := f.swaps.Load()
		for i := range 50 {
			name := "burst-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			if _, err := f.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb(name, "reader", userSubject("erin")), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		clusterWaitFor(t, "all 50 bindings", func() bool {
			return len(bindingsFor(f.src.Current(), "erin", nil, "")) == 50
		})
		// Not a timing assertion: 50 events must not mean 50 rebuilds.
		if n := f.swaps.Load() - before; n >= 50 {
			t.Errorf("%d rebuilds for 50 events, want them coalesced", n)
		} else {
			t.Logf("50 events, %d rebuilds", n)
		}
	})
}

func TestClusterSourceSkipsBadProjects(t *testing.T) {
	f := newClusterFixture(t, clustersource.Options{},
		clusterProject("argoproj.io", "argocd", "good", saSpec("team-a", "deployer")),
		// destinationServiceAccounts is not a list: does not decode.
		clusterProject("argoproj.io", "argocd", "malformed", map[string]any{"destinationServiceAccounts": "deployer"}),
		// decodes but does not validate (defaultServiceAccount with a '*').
		clusterProject("argoproj.io", "argocd", "invalid", saSpec("team-a", "deploy*")),
		// argoproj.io is decoded leniently: fields deputy does not know are fine.
		clusterProject("argoproj.io", "argocd", "argo-extras", map[string]any{"syncWindows": []any{map[string]any{"kind": "allow"}}}),
		// deputy.dev is decoded strictly.
		clusterProject("deputy.dev", "deputy-system", "typo", map[string]any{"destinationServiceAcounts": []any{}}),
		clusterProject("deputy.dev", "deputy-system", "fine", saSpec("team-b", "sync")),
	)
	f.run(t)
	s := f.waitSynced(t)
	want := []string{"argoproj.io argocd/argo-extras", "argoproj.io argocd/good", "deputy.dev deputy-system/fine"}
	if got := projectKeys(s); !slices.Equal(got, want) {
		t.Errorf("projects = %v, want %v", got, want)
	}
	if st := f.src.Status(); st.SkippedProjects != 3 || st.Projects != 3 || !st.Ready() {
		t.Errorf("status = %+v, want 3 projects, 3 skipped, ready", st)
	}
	logs := f.logs.String()
	for _, name := range []string{"name=malformed", "name=invalid", "name=typo"} {
		if !strings.Contains(logs, name) {
			t.Errorf("the skipped project %s is not logged:\n%s", name, logs)
		}
	}
}

func TestClusterSourceMissingCRD(t *testing.T) {
	f := newClusterFixture(t, clustersource.Options{DiscoveryInterval: 20 * time.Millisecond},
		clusterProject("argoproj.io", "argocd", "guestbook", saSpec("guestbook", "deployer")),
		clusterProject("deputy.dev", "deputy-system", "platform", saSpec("platform", "sync")),
	)
	f.disco.set("deputy.dev/v1alpha1", false)
	f.run(t)

	t.Run("a group whose CRD is not installed counts as synced with no projects", func(t *testing.T) {
		s := f.waitSynced(t)
		if got := projectKeys(s); !slices.Equal(got, []string{"argoproj.io argocd/guestbook"}) {
			t.Errorf("projects = %v", got)
		}
		st := f.src.Status()
		if !slices.Equal(st.AbsentGroups, []string{"deputy.dev"}) || !st.Ready() {
			t.Errorf("status = %+v, want deputy.dev absent and ready", st)
		}
		if n := strings.Count(f.logs.String(), "AppProject CRD is not installed"); n != 1 {
			t.Errorf("the absent group is logged %d times, want once:\n%s", n, f.logs.String())
		}
	})

	t.Run("installing the CRD later starts its informer", func(t *testing.T) {
		f.disco.set("deputy.dev/v1alpha1", true)
		clusterWaitFor(t, "the deputy.dev project", func() bool {
			return projectSA(f.src.Current(), "deputy.dev", "deputy-system", "platform") == "sync"
		})
		if st := f.src.Status(); len(st.AbsentGroups) != 0 || st.Projects != 2 {
			t.Errorf("status = %+v", st)
		}
	})

	t.Run("removing the CRD drops its projects", func(t *testing.T) {
		f.disco.set("deputy.dev/v1alpha1", false)
		clusterWaitFor(t, "the deputy.dev project to disappear", func() bool {
			return projectSA(f.src.Current(), "deputy.dev", "deputy-system", "platform") == ""
		})
		if !f.src.Current().Synced {
			t.Error("the state must stay synced")
		}
	})
}

func TestClusterSourceDiscoveryFailure(t *testing.T) {
	f := newClusterFixture(t, clustersource.Options{})
	f.disco.fail(errors.New("connection refused"))
	f.run(t)
	clusterWaitFor(t, "the discovery failure", func() bool { return f.src.Status().LastError != nil })
	if st := f.src.Status(); st.Synced || !strings.Contains(st.LastError.Error(), "failed to discover appprojects.argoproj.io") {
		t.Errorf("status = %+v, want unsynced with the discovery error", st)
	}
	if f.src.Current().Synced {
		t.Error("the state must not be synced while it is unknown whether the CRDs exist")
	}
	f.disco.fail(nil) // retried after ~1s
	f.waitSynced(t)
	clusterWaitFor(t, "readiness", func() bool { return f.src.Status().Ready() })
}

func TestClusterSourceNamespaces(t *testing.T) {
	f := newClusterFixture(t, clustersource.Options{Namespaces: []string{"argocd", "team-x"}},
		clusterProject("argoproj.io", "argocd", "in", saSpec("a", "deployer")),
		clusterProject("argoproj.io", "team-x", "in-too", saSpec("a", "deployer")),
		clusterProject("argoproj.io", "elsewhere", "out", saSpec("a", "deployer")),
		clusterProject("deputy.dev", "elsewhere", "out", saSpec("a", "deployer")),
	)
	f.run(t)
	s := f.waitSynced(t)
	if got := projectKeys(s); !slices.Equal(got, []string{"argoproj.io argocd/in", "argoproj.io team-x/in-too"}) {
		t.Errorf("projects = %v, want only those of argocd and team-x", got)
	}
}

func TestClusterSourceOnChangeAndRun(t *testing.T) {
	var states, later []*policy.ClusterState
	var order []string
	var mu sync.Mutex
	f := newClusterFixture(t, clustersource.Options{OnChange: func(s *policy.ClusterState) {
		mu.Lock()
		defer mu.Unlock()
		states = append(states, s)
		order = append(order, "options")
	}})
	// A listener registered with the method, as on policy.FileSource, gets
	// every state too, after the one of the options.
	f.src.OnChange(func(s *policy.ClusterState) {
		mu.Lock()
		defer mu.Unlock()
		later = append(later, s)
		order = append(order, "method")
	})
	f.run(t)
	s := f.waitSynced(t)
	mu.Lock()
	if len(states) == 0 || states[len(states)-1] != s || states[0].Synced {
		t.Errorf("OnChange got %d states, want the unsynced initial one first and the current one last", len(states))
	}
	if len(later) != len(states) || later[len(later)-1] != s || len(order) < 2 || order[0] != "options" || order[1] != "method" {
		t.Errorf("the OnChange method's listener got %d states (options' listener: %d), order %v", len(later), len(states), order)
	}
	mu.Unlock()
	if err := f.src.Run(t.Context()); err == nil {
		t.Error("a second Run must fail")
	}
}

func TestNewClusterSource(t *testing.T) {
	kube := kubefake.NewClientset()
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	for _, tc := range []struct {
		name    string
		clients clustersource.Clients
		opts    clustersource.Options
		wantErr string
	}{
		{"clients are required", clustersource.Clients{Kube: kube}, clustersource.Options{}, "clients are required"},
		{"durations must not be negative", clustersource.Clients{Kube: kube, Dynamic: dyn}, clustersource.Options{Debounce: -time.Second}, "must not be negative"},
		{"an empty namespace is rejected", clustersource.Clients{Kube: kube, Dynamic: dyn}, clustersource.Options{Namespaces: []string{""}}, "empty name"},
		{"discovery defaults to the clientset's", clustersource.Clients{Kube: kube, Dynamic: dyn}, clustersource.Options{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := clustersource.NewForClients(tc.clients, tc.opts)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	if _, err := clustersource.New(nil, clustersource.Options{}); err == nil {
		t.Error("a nil REST config must fail")
	}
}

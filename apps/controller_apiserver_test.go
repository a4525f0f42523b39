//go:build envtest

// These tests run cluster mode's Application controller (apps.Controller,
// with client-go leader election) in-process against a real kube-apiserver
// and etcd (envtest), with a Runner that blocks until the test releases each
// run. They are behind the envtest build tag so that the package's unit tests
// do not compile envtest; one control plane serves the whole package:
//
//	KUBEBUILDER_ASSETS=$PWD/bin go test -tags envtest -run APIServer ./apps/

package apps_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/webhook"
)

// The control plane is started by the first test that needs it and stopped
// by TestMain.
var apiServer struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if apiServer.env != nil {
		_ = apiServer.env.Stop()
	}
	os.Exit(code)
}

// ctlEnv is the envtest control plane's admin configuration, shared by the
// tests (copies are handed out).
func ctlEnv(t *testing.T) *rest.Config {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd (make test-binaries puts them in bin/)")
	}
	apiServer.once.Do(func() {
		root, err := filepath.Abs("..")
		if err != nil {
			apiServer.err = err
			return
		}
		env := &envtest.Environment{
			BinaryAssetsDirectory:    assets,
			CRDDirectoryPaths:        []string{filepath.Join(root, "manifests", "crds")},
			ErrorIfCRDPathMissing:    true,
			ControlPlaneStartTimeout: 2 * time.Minute,
		}
		cfg, err := env.Start()
		if err != nil {
			apiServer.err = err
			return
		}
		apiServer.env, apiServer.cfg = env, cfg
	})
	if apiServer.err != nil {
		t.Fatalf("starting kube-apiserver and etcd (envtest): %v", apiServer.err)
	}
	return rest.CopyConfig(apiServer.cfg)
}

// ctlRun is one Run call of ctlRunner.
type ctlRun struct {
	uid         types.UID
	generation  int64
	initiatedBy string
	sync        v1alpha1.SyncOperation
	concurrent  int           // runs in progress when this one started, itself included
	release     chan struct{} // closed by succeed
	once        sync.Once
	ended       chan struct{}
	cancelled   bool // set before ended is closed
}

// succeed lets the run end successfully (if it still runs).
func (r *ctlRun) succeed() { r.once.Do(func() { close(r.release) }) }

func (r *ctlRun) String() string {
	return fmt.Sprintf("run of uid=%s gen=%d by=%q", r.uid, r.generation, r.initiatedBy)
}

// ctlRunner is the controllers' Runner: every run blocks until the test
// releases it (then it succeeds) or its context ends (then it fails). It is
// shared by the replicas of a test, so that it sees runs on two replicas at
// once.
type ctlRunner struct {
	mu         sync.Mutex
	running    int
	maxRunning int
	runs       []*ctlRun
	started    chan *ctlRun
	// results are the resource results of every successful run.
	results []*v1alpha1.ResourceResult
}

func newCtlRunner() *ctlRunner { return &ctlRunner{started: make(chan *ctlRun, 1000)} }

func (f *ctlRunner) Run(ctx context.Context, req syncer.Request, _ syncer.Progress) *v1alpha1.OperationState {
	run := &ctlRun{uid: req.Application.UID, generation: req.Application.Generation, initiatedBy: req.InitiatedBy.Username,
		sync: *req.Sync.DeepCopy(), release: make(chan struct{}), ended: make(chan struct{})}
	f.mu.Lock()
	f.running++
	f.maxRunning = max(f.maxRunning, f.running)
	run.concurrent = f.running
	f.runs = append(f.runs, run)
	f.mu.Unlock()
	f.started <- run
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
		close(run.ended)
	}()
	select {
	case <-run.release:
		now := metav1.Now()
		f.mu.Lock()
		results := f.results
		f.mu.Unlock()
		res := &v1alpha1.SyncOperationResult{Revision: "abc", Resources: results}
		if req.Application.Spec.HasMultipleSources() {
			res.Revision, res.Revisions = "", req.Sync.Revisions
		}
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, Message: "done: " + run.String(), FinishedAt: &now, SyncResult: res}
	case <-ctx.Done():
		f.mu.Lock()
		run.cancelled = true
		f.mu.Unlock()
		now := metav1.Now()
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Message: "cancelled: " + run.String(), FinishedAt: &now}
	}
}

// succeedAll lets every run end (so that a failed test's replicas stop).
func (f *ctlRunner) succeedAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.runs {
		r.succeed()
	}
}

// next waits for the next run to start.
func (f *ctlRunner) next(t *testing.T, what string) *ctlRun {
	t.Helper()
	select {
	case run := <-f.started:
		t.Logf("started: %s", run)
		return run
	case <-time.After(ctlWait):
		t.Fatalf("timed out waiting for %s to start", what)
		return nil
	}
}

// ctlWait is the generous deadline of every wait: the machine may be busy.
const ctlWait = 60 * time.Second

// ctlLease are the leader election settings of the tests: short, so that a
// lost Lease is taken over quickly.
var ctlLease = apps.LeaderElectionOptions{Namespace: "default", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}

// stolenFor is how long a stolen Lease stays with its thief: beyond the
// leader's RenewDeadline (else the leader takes it back in time and never
// stops leading).
const stolenFor = 5 // seconds

// lockedBuffer collects a test's controller logs (printed when it fails).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ctlFixture is one test's namespace, Lease, Runner and replicas.
type ctlFixture struct {
	t      *testing.T
	cfg    *rest.Config
	ns     string
	lease  string
	runner *ctlRunner
	// run, if set, runs the replicas' operations instead of runner.
	run syncer.Runner
	// deleter, if set, is the replicas' ResourceDeleter.
	deleter apps.ResourceDeleter
	logs    *lockedBuffer
	dyn     dynamic.NamespaceableResourceInterface
	kube    kubernetes.Interface
}

func newCtlFixture(t *testing.T, ns string) *ctlFixture {
	t.Helper()
	cfg := ctlEnv(t)
	f := &ctlFixture{t: t, cfg: cfg, ns: ns, lease: "lease-" + ns, runner: newCtlRunner(), logs: &lockedBuffer{},
		dyn: dynamic.NewForConfigOrDie(cfg).Resource(apps.ApplicationsResource), kube: kubernetes.NewForConfigOrDie(cfg)}
	if _, err := f.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CONTROLLER_LOGS") != "" {
			t.Logf("controller logs:\n%s", f.logs.String())
		}
	})
	return f
}

// replica is one running Controller.
type replica struct {
	*apps.Controller
	stop func()        // cancels Run's context (SIGTERM)
	done chan struct{} // closed when Run returned
}

func (f *ctlFixture) newController(id string, grace time.Duration, cfg *rest.Config) *apps.Controller {
	f.t.Helper()
	le := ctlLease
	le.Name, le.Identity = f.lease, id
	var runner syncer.Runner = f.runner
	if f.run != nil {
		runner = f.run
	}
	c, err := apps.NewController(apps.ControllerOptions{
		Config: cfg, Runner: runner, Revisions: ctlRevisions{}, Deleter: f.deleter,
		Projects: func(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
			return &v1alpha1.AppProject{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: app.Spec.Project}}, nil
		},
		ReconcilePeriod: time.Hour, ShutdownGrace: grace, Namespaces: []string{f.ns},
		LeaderElection: le,
		Logger:         slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", id),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// start runs a replica until the test ends (or stop).
func (f *ctlFixture) start(c *apps.Controller) *replica {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{Controller: c, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := c.Run(ctx); err != nil {
			f.t.Errorf("Run of %s: %v", c.Identity(), err)
		}
	}()
	f.t.Cleanup(func() {
		cancel()
		f.runner.succeedAll()
		<-r.done
	})
	return r
}

// leader starts a replica and waits until it leads.
func (f *ctlFixture) leader(id string, grace time.Duration) *replica {
	f.t.Helper()
	r := f.start(f.newController(id, grace, rest.CopyConfig(f.cfg)))
	f.waitFor(id+" to lead", r.IsLeader)
	return r
}

// follower starts a replica while another leads.
func (f *ctlFixture) follower(id string, grace time.Duration) *replica {
	f.t.Helper()
	r := f.start(f.newController(id, grace, rest.CopyConfig(f.cfg)))
	f.waitFor(id+" to list the Applications", r.Synced)
	return r
}

type ctlRevisions struct{}

func (ctlRevisions) ResolveRevisions(_ context.Context, app *v1alpha1.Application, _ *v1alpha1.AppProject) ([]string, error) {
	out := make([]string, len(app.Spec.GetSources()))
	for i := range out {
		out[i] = "abc"
	}
	return out, nil
}

func (f *ctlFixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(ctlWait)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ctlApplication(ns, name string, automated bool) *unstructured.Unstructured {
	app := &v1alpha1.Application{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.KindApplication},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ApplicationSpec{Project: "p",
			Source:      v1alpha1.ApplicationSource{RepoURL: "https://github.com/org/mono.git", Path: ".", TargetRevision: "main"},
			Destination: v1alpha1.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "d"}},
	}
	if automated {
		app.Spec.SyncPolicy = &v1alpha1.SyncPolicy{Automated: &v1alpha1.SyncPolicyAutomated{}}
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(app)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// create creates the Application name and waits until every replica's
// informer has it; it returns its UID.
func (f *ctlFixture) create(name string, replicas ...*replica) types.UID {
	f.t.Helper()
	u, err := f.dyn.Namespace(f.ns).Create(f.t.Context(), ctlApplication(f.ns, name, false), metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range replicas {
		f.waitFor(r.Identity()+" to see "+name, func() bool {
			app, _ := r.Application(f.ns, name)
			return app != nil && app.UID == u.GetUID()
		})
	}
	return u.GetUID()
}

// delete deletes the Application name and waits until every replica's
// informer has dropped it.
func (f *ctlFixture) delete(name string, replicas ...*replica) {
	f.t.Helper()
	if err := f.dyn.Namespace(f.ns).Delete(f.t.Context(), name, metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
	for _, r := range replicas {
		f.waitFor(r.Identity()+" to drop "+name, func() bool { app, _ := r.Application(f.ns, name); return app == nil })
	}
}

// sync requests a sync through replica r, as deputy's API does.
func (f *ctlFixture) sync(r *replica, name, user string) *v1alpha1.OperationState {
	f.t.Helper()
	app, err := r.Application(f.ns, name)
	if err != nil || app == nil {
		f.t.Fatalf("%s does not know %s/%s: %v", r.Identity(), f.ns, name, err)
	}
	st, err := r.Start(f.t.Context(), app, nil, v1alpha1.SyncOperation{}, v1alpha1.InitiatedBy{Username: user})
	if err != nil {
		f.t.Fatalf("sync of %s by %s: %v", name, user, err)
	}
	return st
}

// get reads the Application from the apiserver (nil when it does not exist).
func (f *ctlFixture) get(name string) *v1alpha1.Application {
	f.t.Helper()
	u, err := f.dyn.Namespace(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	app := &v1alpha1.Application{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, app); err != nil {
		f.t.Fatal(err)
	}
	return app
}

// waitDone waits until the Application's operation field is gone and its
// persisted state is final, and returns that state.
func (f *ctlFixture) waitDone(name string) *v1alpha1.OperationState {
	f.t.Helper()
	var st *v1alpha1.OperationState
	f.waitFor("the operation of "+name+" to end and be persisted", func() bool {
		app := f.get(name)
		if app == nil || app.Operation != nil || app.Status.OperationState == nil || app.Status.OperationState.Phase == v1alpha1.OperationRunning {
			return false
		}
		st = app.Status.OperationState
		return true
	})
	return st
}

// stealLease gives the Lease to holder, a replica that does not run (as if
// the leader's renewals stopped reaching the apiserver), for seconds.
func (f *ctlFixture) stealLease(holder string, seconds int32) {
	f.t.Helper()
	leases := f.kube.CoordinationV1().Leases(ctlLease.Namespace)
	now := metav1.NewMicroTime(time.Now())
	spec := coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now}
	l, err := leases.Get(f.t.Context(), f.lease, metav1.GetOptions{})
	if err != nil {
		if _, err := leases.Create(f.t.Context(), &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ctlLease.Namespace, Name: f.lease}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
		return
	}
	spec.LeaseTransitions = l.Spec.LeaseTransitions
	l.Spec = spec
	if _, err := leases.Update(f.t.Context(), l, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func drain(ch <-chan v1alpha1.OperationEvent) []v1alpha1.OperationEvent {
	var out []v1alpha1.OperationEvent
	for ev := range ch {
		out = append(out, ev)
	}
	return out
}

func stateSummary(evs []v1alpha1.OperationEvent) []string {
	var out []string
	for _, ev := range evs {
		if ev.State != nil {
			out = append(out, fmt.Sprintf("%s by=%q gen=%d %q", ev.State.Phase, ev.State.Operation.InitiatedBy.Username, ev.State.ObservedGeneration, ev.State.Message))
		}
	}
	return out
}

// A graceful stop (SIGTERM) of the leader while an operation runs, then the
// Lease is lost during the drain: the operation must be cancelled at once,
// not run on for ShutdownGrace while the next leader runs it again.
func TestAPIServerControllerLeaseLostDuringDrainCancelsTheOperation(t *testing.T) {
	f := newCtlFixture(t, "drain")
	a := f.leader("a", time.Hour) // a drain that only the lost Lease can cut short
	b := f.follower("b", time.Hour)
	f.create("app", a, b)
	f.sync(a, "app", "alice")
	first := f.runner.next(t, "the operation at a")

	a.stop()                         // SIGTERM: a drains while it holds the Lease
	f.stealLease("thief", stolenFor) // then its renewals stop succeeding

	second := f.runner.next(t, "the operation at the next leader")
	if !b.IsLeader() {
		t.Errorf("the operation ran again, but not at b (b leading: %v, a leading: %v)", b.IsLeader(), a.IsLeader())
	}
	select {
	case <-first.ended:
	default:
		t.Errorf("the operation still runs at a, which lost the Lease, while the next leader runs it again")
	}
	if second.concurrent != 1 {
		t.Errorf("the same operation ran on two replicas at once (%d runs when the second started)", second.concurrent)
	}
	second.succeed()
	if st := f.waitDone("app"); st.Phase != v1alpha1.OperationSucceeded || st.Message != "done: "+second.String() {
		t.Errorf("persisted state = %s %q, want the second run's success", st.Phase, st.Message)
	}
	select {
	case <-a.done:
	case <-time.After(ctlWait):
		t.Fatal("a's Run did not return after its operation was cancelled")
	}
	first.succeed() // in case it still runs
	f.runner.mu.Lock()
	if !first.cancelled {
		t.Errorf("the first run was not cancelled")
	}
	if f.runner.maxRunning != 1 {
		t.Errorf("at most %d runs at once, want 1", f.runner.maxRunning)
	}
	f.runner.mu.Unlock()
}

// An Application deleted and created again under the same name within one
// leadership term is another object: its syncs run like any other's.
func TestAPIServerControllerRecreatedApplicationSyncs(t *testing.T) {
	f := newCtlFixture(t, "recreate")
	a := f.leader("a", 5*time.Second)
	oldUID := f.create("app", a)
	for _, user := range []string{"alice", "bob"} {
		f.sync(a, "app", user)
		run := f.runner.next(t, "the sync by "+user)
		run.succeed()
		f.waitDone("app")
	}
	t.Logf("old object: generation %d", f.get("app").Generation)

	f.delete("app", a)
	newUID := f.create("app", a)
	f.sync(a, "app", "carol")
	run := f.runner.next(t, "the sync of the recreated Application")
	if run.uid != newUID || run.initiatedBy != "carol" {
		t.Errorf("ran %s; want the recreated object's (uid %s, old uid %s) sync by carol", run, newUID, oldUID)
	}
	run.succeed()
	if st := f.waitDone("app"); st.Phase != v1alpha1.OperationSucceeded || st.Operation.InitiatedBy.Username != "carol" {
		t.Errorf("persisted state = %s by %q, want Succeeded by carol", st.Phase, st.Operation.InitiatedBy.Username)
	}
}

// The operation field is removed by someone else while its operation runs
// (kubectl patch ... remove /operation, as Argo CD users cancel a sync) and a
// new sync is recorded: the end of the first operation must not remove the
// second, which runs next.
func TestAPIServerControllerEndOfAnOperationKeepsTheOneRecordedMeanwhile(t *testing.T) {
	f := newCtlFixture(t, "recorded-meanwhile")
	a := f.leader("a", 5*time.Second)
	f.create("app", a)
	f.sync(a, "app", "first")
	first := f.runner.next(t, "the first sync")

	if _, err := f.dyn.Namespace(f.ns).Patch(t.Context(), "app", types.JSONPatchType, []byte(`[{"op":"remove","path":"/operation"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("a to see the operation removed", func() bool { app, _ := a.Application(f.ns, "app"); return app.Operation == nil })
	f.sync(a, "app", "second")
	f.waitFor("a to see the second operation", func() bool {
		app, _ := a.Application(f.ns, "app")
		return app.Operation != nil && app.Operation.InitiatedBy.Username == "second"
	})
	first.succeed()

	second := f.runner.next(t, "the second sync")
	if second.initiatedBy != "second" {
		t.Errorf("ran %s, want the second sync", second)
	}
	second.succeed()
	if st := f.waitDone("app"); st.Phase != v1alpha1.OperationSucceeded || st.Operation.InitiatedBy.Username != "second" {
		t.Errorf("persisted state = %s by %q, want Succeeded by second", st.Phase, st.Operation.InitiatedBy.Username)
	}
}

// An Application deleted and created again while its operation runs: the
// operation's states are not written to the new object, its end does not
// remove the new object's operation, and that operation runs.
func TestAPIServerControllerReplacedApplicationGetsNothingOfTheOldOperation(t *testing.T) {
	f := newCtlFixture(t, "replaced")
	a := f.leader("a", 5*time.Second)
	f.create("app", a)
	f.sync(a, "app", "old")
	old := f.runner.next(t, "the old object's sync")

	f.delete("app", a)
	newUID := f.create("app", a)
	f.sync(a, "app", "new")
	old.succeed()
	<-old.ended

	var sawOld []string
	checkNew := func() {
		if app := f.get("app"); app != nil && app.UID == newUID && app.Status.OperationState != nil &&
			app.Status.OperationState.Operation.InitiatedBy.Username != "new" {
			sawOld = append(sawOld, fmt.Sprintf("%s by %q", app.Status.OperationState.Phase, app.Status.OperationState.Operation.InitiatedBy.Username))
		}
	}
	var run *ctlRun
	f.waitFor("the new object's sync to start", func() bool {
		checkNew()
		select {
		case run = <-f.runner.started:
			return true
		default:
			app := f.get("app")
			if app != nil && app.Operation == nil {
				t.Fatalf("the new object's operation was removed without running; status %+v", app.Status.OperationState)
			}
			return false
		}
	})
	if run.uid != newUID || run.initiatedBy != "new" {
		t.Errorf("ran %s, want the new object's (uid %s) sync by new", run, newUID)
	}
	checkNew()
	run.succeed()
	st := f.waitDone("app")
	if st.Phase != v1alpha1.OperationSucceeded || st.Operation.InitiatedBy.Username != "new" {
		t.Errorf("persisted state = %s by %q, want Succeeded by new", st.Phase, st.Operation.InitiatedBy.Username)
	}
	if len(sawOld) > 0 {
		t.Errorf("the new object got the old operation's states: %v", sawOld)
	}
}

// A watch served by a leader that loses the Lease mid-operation: the
// cancelled run there is not the operation's end; the watch follows the
// Application until the next leader's run ends, and tells the client what
// was persisted.
func TestAPIServerControllerWatchAtALeaderThatLosesTheLeaseEndsWithThePersistedState(t *testing.T) {
	f := newCtlFixture(t, "watch-leader")
	a := f.leader("a", 5*time.Second)
	b := f.follower("b", 5*time.Second)
	f.create("app", a, b)
	f.sync(a, "app", "alice")
	first := f.runner.next(t, "the operation at a")

	ctx, cancel := context.WithTimeout(t.Context(), 2*ctlWait)
	defer cancel()
	ch := a.Watch(ctx, f.ns, "app")
	f.stealLease("thief", stolenFor)
	secondCh := make(chan *ctlRun, 1)
	go func() {
		select {
		case run := <-f.runner.started:
			secondCh <- run
			run.succeed()
		case <-ctx.Done():
		}
	}()
	evs := drain(ch)
	if ctx.Err() != nil {
		t.Fatalf("the watch did not end; events %q", stateSummary(evs))
	}
	t.Logf("events: %q", stateSummary(evs))
	var second *ctlRun
	select {
	case second = <-secondCh:
	default:
		t.Fatalf("the watch ended before the operation ran again; events %q", stateSummary(evs))
	}
	<-first.ended
	st := f.waitDone("app")
	var last *v1alpha1.OperationState
	for i, ev := range evs {
		if ev.State == nil {
			continue
		}
		last = ev.State
		if ev.State.Phase != v1alpha1.OperationRunning && i != len(evs)-1 {
			t.Errorf("event %d is final (%s %q) but not the last", i, ev.State.Phase, ev.State.Message)
		}
	}
	if last == nil || last.Phase != st.Phase || last.Message != st.Message {
		t.Errorf("the watch ended with %v, the persisted state is %s %q (the run at %s)", last, st.Phase, st.Message, second)
	} else if st.Message != "done: "+second.String() {
		t.Errorf("persisted %s %q, want the second run's", st.Phase, st.Message)
	}
}

// A watch at a replica that does not lead, right after a sync was requested
// through it: the previous operation's final state is not this operation's.
func TestAPIServerControllerWatchAtAFollowerSkipsThePreviousOperation(t *testing.T) {
	f := newCtlFixture(t, "watch-follower")
	a := f.leader("a", 5*time.Second)
	b := f.follower("b", 5*time.Second)
	f.create("app", a, b)
	f.sync(b, "app", "first")
	f.runner.next(t, "the first sync").succeed()
	f.waitFor("b to see the first sync done", func() bool {
		app, _ := b.Application(f.ns, "app")
		return app.Operation == nil && app.Status.OperationState != nil && app.Status.OperationState.Phase == v1alpha1.OperationSucceeded
	})

	f.sync(b, "app", "second")
	ctx, cancel := context.WithTimeout(t.Context(), ctlWait)
	defer cancel()
	ch := b.Watch(ctx, f.ns, "app")
	var evs []v1alpha1.OperationEvent
	// The second run is released only after the watch's first event.
	select {
	case ev, ok := <-ch:
		if ok {
			evs = append(evs, ev)
		}
	case <-ctx.Done():
		t.Fatal("no event")
	}
	if len(evs) == 0 || evs[0].State == nil || evs[0].State.Operation.InitiatedBy.Username != "second" || evs[0].State.Phase != v1alpha1.OperationRunning {
		t.Errorf("first event %q, want the second sync's Running state", stateSummary(evs))
	}
	second := f.runner.next(t, "the second sync")
	second.succeed()
	evs = append(evs, drain(ch)...)
	if ctx.Err() != nil {
		t.Fatalf("the watch did not end; events %q", stateSummary(evs))
	}
	t.Logf("events: %q", stateSummary(evs))
	for i, ev := range evs {
		if ev.State != nil && ev.State.Operation.InitiatedBy.Username != "second" {
			t.Errorf("event %d is the state of another operation: %q", i, stateSummary(evs[i:i+1]))
		}
	}
	if last := evs[len(evs)-1]; last.State == nil || last.State.Phase != v1alpha1.OperationSucceeded {
		t.Errorf("last event %q, want the second sync's success", stateSummary(evs[len(evs)-1:]))
	}
}

// A Git push matching many automated Applications, received by a replica
// that does not lead: each is recorded, with deputy's client configuration
// (no QPS set: client-go's default rate limit), within the webhook's time.
func TestAPIServerControllerGitWebhookRecordsManyApplications(t *testing.T) {
	const n = 150
	f := newCtlFixture(t, "webhook")
	fast := rest.CopyConfig(f.cfg)
	fast.QPS, fast.Burst = -1, 0
	client := dynamic.NewForConfigOrDie(fast).Resource(apps.ApplicationsResource).Namespace(f.ns)
	for i := range n {
		if _, err := client.Create(t.Context(), ctlApplication(f.ns, fmt.Sprintf("m%03d", i), true), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.stealLease("another-replica", 3600) // the receiving replica never leads
	deputyCfg := rest.CopyConfig(f.cfg)
	deputyCfg.QPS, deputyCfg.Burst = 0, 0 // as config.Cluster.RESTConfig builds it
	c := f.start(f.newController("receiver", 5*time.Second, deputyCfg))
	f.waitFor("the Applications to be listed", func() bool { l, _ := c.List(); return len(l) == n })

	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := webhook.NewGitWebhookHandler(webhook.GitWebhookOptions{
		GitHubSecretFile: secret, MaxPayloadBytes: 1 << 20,
		Applications: c.List,
		Trigger:      c.Trigger,
	})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"ref":"refs/heads/main","after":"1111111111111111111111111111111111111111","repository":{"html_url":"https://github.com/org/mono","default_branch":"main"}}`
	mac := hmac.New(sha256.New, []byte("k"))
	mac.Write([]byte(body))
	req := httptest.NewRequest(http.MethodPost, "/api/webhook", strings.NewReader(body))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	msg := rec.Body.String()
	if len(msg) > 1000 {
		msg = msg[:1000] + "..."
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("a push matching %d automated Applications is answered %d: %s", n, rec.Code, msg)
	}
	var res webhook.GitWebhookResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, msg)
	}
	if len(res.Triggered) != n {
		t.Errorf("%d triggered, want %d: %s", len(res.Triggered), n, msg)
	}
	l, err := client.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recorded := 0
	for _, u := range l.Items {
		if _, ok := u.Object["operation"]; ok {
			recorded++
		}
	}
	if recorded != n {
		t.Errorf("%d Applications record an operation, want %d", recorded, n)
	}
	f.runner.mu.Lock()
	defer f.runner.mu.Unlock()
	if len(f.runner.runs) != 0 {
		t.Errorf("a replica that does not lead ran %d operations", len(f.runner.runs))
	}
}

// An automated Application with spec.sources syncs with one revision per
// source (operation.sync.revisions, what the engine resolves for each), its
// status records them (status.sync.revisions), and a change that moves no
// source starts no new sync.
func TestAPIServerControllerAutomatedMultiSourceSyncsWithRevisionsPerSource(t *testing.T) {
	f := newCtlFixture(t, "multi-source")
	f.leader("a", 5*time.Second)
	u := ctlApplication(f.ns, "multi", true)
	spec := u.Object["spec"].(map[string]any)
	delete(spec, "source")
	spec["sources"] = []any{
		map[string]any{"repoURL": "https://github.com/org/charts.git", "path": "web", "targetRevision": "main"},
		map[string]any{"repoURL": "https://github.com/org/values.git", "targetRevision": "main", "ref": "values"},
	}
	if _, err := f.dyn.Namespace(f.ns).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := f.runner.next(t, "the automated sync of the new Application")
	if len(run.sync.Revisions) != 2 || run.sync.Revisions[0] != "abc" || run.sync.Revisions[1] != "abc" || run.sync.Revision != "" {
		t.Errorf("automated sync = %+v, want revisions [abc abc] and no single revision", run.sync)
	}
	run.succeed()
	f.waitDone("multi")
	f.waitFor("status.sync.revisions", func() bool {
		app := f.get("multi")
		return app != nil && app.Status.Sync.Status == v1alpha1.SyncStatusCodeSynced && len(app.Status.Sync.Revisions) == 2
	})
	update := func(change func(spec map[string]any)) {
		t.Helper()
		cur, err := f.dyn.Namespace(f.ns).Get(t.Context(), "multi", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(cur.Object["spec"].(map[string]any))
		if _, err := f.dyn.Namespace(f.ns).Update(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A spec change that moves no source: no new sync.
	update(func(spec map[string]any) {
		spec["syncPolicy"].(map[string]any)["syncOptions"] = []any{"CreateNamespace=true"}
	})
	select {
	case run := <-f.runner.started:
		t.Errorf("a change that moved no source started %s", run)
	case <-time.After(3 * time.Second):
	}
	// A third source: its revision is new, so the Application syncs again.
	update(func(spec map[string]any) {
		spec["sources"] = append(spec["sources"].([]any), map[string]any{"repoURL": "https://github.com/org/extra.git", "path": "."})
	})
	run = f.runner.next(t, "the automated sync after a source was added")
	if len(run.sync.Revisions) != 3 {
		t.Errorf("automated sync = %+v, want three revisions", run.sync)
	}
	run.succeed()
	f.waitDone("multi")
}

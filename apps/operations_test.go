package apps_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// fakeRunner runs operations the test scripts: each Run reports the
// resources of its script through progress, then blocks until the test
// releases it (or its context ends), then returns the scripted final state.
// Without a script it fails the operation: fakes deny by default.
type fakeRunner struct {
	mu       sync.Mutex
	scripts  map[string]script // namespace/name
	started  chan string       // receives namespace/name when Run begins
	running  atomic.Int32
	maxSeen  atomic.Int32
	requests []syncer.Request
}

type script struct {
	resources []*v1alpha1.ResourceResult
	release   chan struct{} // nil: do not block
	final     func(req syncer.Request) *v1alpha1.OperationState
	panics    bool
}

func newFakeRunner() *fakeRunner {
	return &fakeRunner{scripts: map[string]script{}, started: make(chan string, 100)}
}

func (f *fakeRunner) script(ns, name string, s script) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts[ns+"/"+name] = s
}

func (f *fakeRunner) Run(ctx context.Context, req syncer.Request, progress syncer.Progress) *v1alpha1.OperationState {
	key := req.Application.Namespace + "/" + req.Application.Name
	f.mu.Lock()
	s, ok := f.scripts[key]
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	n := f.running.Add(1)
	defer f.running.Add(-1)
	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	f.started <- key
	if !ok {
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Message: "fake runner: no script for " + key}
	}
	if s.panics {
		panic("fake runner exploded")
	}
	progress(&v1alpha1.OperationState{Phase: v1alpha1.OperationRunning, Message: "applying", Identity: "system:serviceaccount:guestbook:guestbook-deployer"}, nil)
	for _, r := range s.resources {
		progress(nil, r)
	}
	if s.release != nil {
		select {
		case <-s.release:
		case <-ctx.Done():
			return &v1alpha1.OperationState{Phase: v1alpha1.OperationError, Message: "cancelled: " + ctx.Err().Error()}
		}
	}
	if s.final != nil {
		return s.final(req)
	}
	return &v1alpha1.OperationState{
		Phase:      v1alpha1.OperationSucceeded,
		Message:    "successfully synced",
		Identity:   "system:serviceaccount:guestbook:guestbook-deployer",
		SyncResult: &v1alpha1.SyncOperationResult{Revision: "0123abc", Resources: s.resources},
	}
}

func (f *fakeRunner) waitStarted(t *testing.T, key string) {
	t.Helper()
	select {
	case got := <-f.started:
		if got != key {
			t.Fatalf("started %s, want %s", got, key)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("operation of %s never started", key)
	}
}

func app(ns, name string) *v1alpha1.Application {
	a := &v1alpha1.Application{Spec: v1alpha1.ApplicationSpec{
		Project:     "guestbook",
		Source:      v1alpha1.ApplicationSource{RepoURL: "https://example/repo.git", TargetRevision: "main"},
		Destination: v1alpha1.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: ns},
	}}
	a.Namespace, a.Name = ns, name
	return a
}

func project(ns string) *v1alpha1.AppProject {
	p := &v1alpha1.AppProject{}
	p.Namespace, p.Name = ns, "guestbook"
	return p
}

var (
	web = &v1alpha1.ResourceResult{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "web", Status: v1alpha1.ResultCodeSynced}
	svc = &v1alpha1.ResourceResult{Version: "v1", Kind: "Service", Namespace: "guestbook", Name: "web", Status: v1alpha1.ResultCodeSynced}
)

var alice = v1alpha1.InitiatedBy{Username: "alice"}

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// audit returns the attributes of every audit line.
func (r *recorder) audit() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.records {
		if rec.Message != apps.AuditMessage {
			continue
		}
		m := map[string]string{"level": rec.Level.String()}
		rec.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s string
	for _, rec := range r.records {
		s += rec.Message
		rec.Attrs(func(a slog.Attr) bool {
			s += " " + a.String()
			return true
		})
		s += "\n"
	}
	return s
}

func newOps(t *testing.T, r syncer.Runner, opts apps.OperationsOptions) (*apps.Operations, *recorder) {
	t.Helper()
	rec := &recorder{}
	if opts.Logger == nil {
		opts.Logger = slog.New(rec)
	}
	ops := apps.NewOperations(r, opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ops.Shutdown(ctx)
	})
	return ops, rec
}

// waitFinished polls Status until the operation is no longer Running.
func waitFinished(t *testing.T, ops *apps.Operations, ns, name string) *v1alpha1.OperationState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if st, ok := ops.Status(ns, name); ok && st.Phase != v1alpha1.OperationRunning {
			return st
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("operation of %s/%s did not finish", ns, name)
	return nil
}

func collect(t *testing.T, ch <-chan v1alpha1.OperationEvent) []v1alpha1.OperationEvent {
	t.Helper()
	var out []v1alpha1.OperationEvent
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("watch did not end; got %d events", len(out))
		}
	}
}

// summary renders events compactly: "resource Deployment/web Synced", "state Running".
func summary(evs []v1alpha1.OperationEvent) []string {
	var out []string
	for _, ev := range evs {
		switch ev.Type {
		case v1alpha1.OperationEventResource:
			out = append(out, fmt.Sprintf("resource %s/%s %s", ev.Resource.Kind, ev.Resource.Name, ev.Resource.Status))
		case v1alpha1.OperationEventState:
			out = append(out, "state "+ev.State.Phase)
		default:
			out = append(out, "unknown "+ev.Type)
		}
	}
	return out
}

func TestStartReturnsRunningAndRefusesASecondOperationOfTheSameApplication(t *testing.T) {
	runner := newFakeRunner()
	release := make(chan struct{})
	runner.script("guestbook", "guestbook", script{resources: []*v1alpha1.ResourceResult{web}, release: release})
	ops, _ := newOps(t, runner, apps.OperationsOptions{})

	st, err := ops.Start(t.Context(), app("guestbook", "guestbook"), project("guestbook"), v1alpha1.SyncOperation{Revision: "v2", Prune: true}, alice)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != v1alpha1.OperationRunning || st.StartedAt.IsZero() || st.FinishedAt != nil {
		t.Errorf("Start returned %+v, want a Running state with a start time", st)
	}
	want := v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{Revision: "v2", Prune: true}, InitiatedBy: alice}
	if diff := cmp.Diff(want, st.Operation); diff != "" {
		t.Errorf("operation (-want +got):\n%s", diff)
	}
	runner.waitStarted(t, "guestbook/guestbook")
	if !ops.Running("guestbook", "guestbook") {
		t.Error("Running = false while the operation runs")
	}

	if _, err := ops.Start(t.Context(), app("guestbook", "guestbook"), project("guestbook"), v1alpha1.SyncOperation{}, alice); !errors.Is(err, apps.ErrOperationInProgress) {
		t.Errorf("second Start: err = %v, want ErrOperationInProgress", err)
	}
	// Another Application is not blocked.
	if _, err := ops.Start(t.Context(), app("other", "app"), project("other"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Errorf("Start of another Application: %v", err)
	}
	runner.waitStarted(t, "other/app")

	close(release)
	final := waitFinished(t, ops, "guestbook", "guestbook")
	if final.Phase != v1alpha1.OperationSucceeded || final.FinishedAt == nil || final.Identity != "system:serviceaccount:guestbook:guestbook-deployer" {
		t.Errorf("final state %+v", final)
	}
	if diff := cmp.Diff(want, final.Operation); diff != "" {
		t.Errorf("final operation (-want +got):\n%s", diff)
	}
	if !final.StartedAt.Equal(&st.StartedAt) {
		t.Errorf("startedAt changed from %v to %v", st.StartedAt, final.StartedAt)
	}

	// The runner got copies of what Start was given and the parameters.
	runner.mu.Lock()
	req := runner.requests[0]
	runner.mu.Unlock()
	if req.Application.Name != "guestbook" || req.Project.Name != "guestbook" || req.Sync.Revision != "v2" || req.InitiatedBy != alice {
		t.Errorf("request %+v", req)
	}

	// Free again: a new operation may start.
	runner.script("guestbook", "guestbook", script{})
	if _, err := ops.Start(t.Context(), app("guestbook", "guestbook"), project("guestbook"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Errorf("Start after the first finished: %v", err)
	}
	runner.waitStarted(t, "guestbook/guestbook")
	waitFinished(t, ops, "guestbook", "guestbook")
}

func TestTheOperationOutlivesTheContextOfStart(t *testing.T) {
	runner := newFakeRunner()
	release := make(chan struct{})
	runner.script("ns", "app", script{release: release})
	ops, _ := newOps(t, runner, apps.OperationsOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	if _, err := ops.Start(ctx, app("ns", "app"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	runner.waitStarted(t, "ns/app")
	cancel() // the HTTP request that started it has been answered
	close(release)
	if st := waitFinished(t, ops, "ns", "app"); st.Phase != v1alpha1.OperationSucceeded {
		t.Errorf("phase %s (%s), want Succeeded: the operation must not be cancelled with the request", st.Phase, st.Message)
	}
}

func TestStartRejectsMissingInputsAndEndedContexts(t *testing.T) {
	ops, _ := newOps(t, newFakeRunner(), apps.OperationsOptions{})
	if _, err := ops.Start(t.Context(), nil, project("ns"), v1alpha1.SyncOperation{}, alice); err == nil {
		t.Error("Start without an Application succeeded")
	}
	if _, err := ops.Start(t.Context(), app("ns", "a"), nil, v1alpha1.SyncOperation{}, alice); err == nil {
		t.Error("Start without an AppProject succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := ops.Start(ctx, app("ns", "a"), project("ns"), v1alpha1.SyncOperation{}, alice); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with an ended context: err = %v", err)
	}
	if _, ok := ops.Status("ns", "a"); ok {
		t.Error("a refused Start left a state behind")
	}
}

func TestWatchStreamsEveryResourceThenTheFinalState(t *testing.T) {
	runner := newFakeRunner()
	release := make(chan struct{})
	runner.script("guestbook", "guestbook", script{resources: []*v1alpha1.ResourceResult{web, svc}, release: release})
	ops, _ := newOps(t, runner, apps.OperationsOptions{})

	if _, err := ops.Start(t.Context(), app("guestbook", "guestbook"), project("guestbook"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	runner.waitStarted(t, "guestbook/guestbook")
	// The watcher arrives while the operation runs, after the resources
	// were reported: it gets them replayed, then the live events.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := ops.Status("guestbook", "guestbook")
		if st.SyncResult != nil && len(st.SyncResult.Resources) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("resources never reported")
		}
		time.Sleep(time.Millisecond)
	}
	ch := ops.Watch(t.Context(), "guestbook", "guestbook")
	late := ops.Watch(t.Context(), "guestbook", "guestbook")
	close(release)
	got := summary(collect(t, ch))
	want := []string{"resource Deployment/web Synced", "resource Service/web Synced", "state Running", "state Succeeded"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, summary(collect(t, late))); diff != "" {
		t.Errorf("second watcher's events (-want +got):\n%s", diff)
	}

	// After the end, a watcher gets the resources and the final state.
	after := collect(t, ops.Watch(t.Context(), "guestbook", "guestbook"))
	if diff := cmp.Diff([]string{"resource Deployment/web Synced", "resource Service/web Synced", "state Succeeded"}, summary(after)); diff != "" {
		t.Errorf("events after the end (-want +got):\n%s", diff)
	}
	if st := after[len(after)-1].State; st.Identity != "system:serviceaccount:guestbook:guestbook-deployer" || st.SyncResult.Revision != "0123abc" {
		t.Errorf("final state %+v", st)
	}
}

func TestWatchFromTheStartSeesLiveEventsInOrder(t *testing.T) {
	runner := newFakeRunner()
	release := make(chan struct{})
	runner.script("guestbook", "guestbook", script{resources: []*v1alpha1.ResourceResult{web, svc}, release: release,
		final: func(syncer.Request) *v1alpha1.OperationState {
			// An engine whose final state omits the resources it reported.
			return &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Message: "prune failed", Identity: "system:serviceaccount:guestbook:guestbook-deployer"}
		}})
	gate := make(chan struct{})
	slow := syncer.RunnerFunc(func(ctx context.Context, req syncer.Request, p syncer.Progress) *v1alpha1.OperationState {
		<-gate // let the watcher subscribe before anything is reported
		return runner.Run(ctx, req, p)
	})
	ops, _ := newOps(t, slow, apps.OperationsOptions{})
	if _, err := ops.Start(t.Context(), app("guestbook", "guestbook"), project("guestbook"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	ch := ops.Watch(t.Context(), "guestbook", "guestbook")
	close(gate)
	runner.waitStarted(t, "guestbook/guestbook")
	close(release)
	evs := collect(t, ch)
	want := []string{"state Running", "state Running", "resource Deployment/web Synced", "resource Service/web Synced", "state Failed"}
	if diff := cmp.Diff(want, summary(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	final := evs[len(evs)-1].State
	if final.SyncResult == nil || len(final.SyncResult.Resources) != 2 {
		t.Errorf("the final state lost the resources reported during the operation: %+v", final.SyncResult)
	}
	if evs[1].State.Message != "applying" {
		t.Errorf("the engine's progress state was not streamed: %+v", evs[1].State)
	}
}

func TestWatchWithoutOperationEndsAtOnce(t *testing.T) {
	ops, _ := newOps(t, newFakeRunner(), apps.OperationsOptions{})
	if evs := collect(t, ops.Watch(t.Context(), "ns", "never")); len(evs) != 0 {
		t.Errorf("events for an Application without operation: %v", summary(evs))
	}
}

func TestWatchEndsWhenTheCallerGoesAway(t *testing.T) {
	runner := newFakeRunner()
	release := make(chan struct{})
	defer close(release)
	runner.script("ns", "app", script{release: release})
	ops, _ := newOps(t, runner, apps.OperationsOptions{})
	if _, err := ops.Start(t.Context(), app("ns", "app"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	runner.waitStarted(t, "ns/app")
	ctx, cancel := context.WithCancel(t.Context())
	ch := ops.Watch(ctx, "ns", "app")
	cancel()
	collect(t, ch) // returns only if the channel is closed
}

func TestEveryOperationWritesOneAuditLine(t *testing.T) {
	runner := newFakeRunner()
	runner.script("guestbook", "guestbook", script{resources: []*v1alpha1.ResourceResult{web}})
	ops, rec := newOps(t, runner, apps.OperationsOptions{})
	if _, err := ops.Start(t.Context(), app("guestbook", "guestbook"), project("guestbook"), v1alpha1.SyncOperation{DryRun: true}, alice); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, ops, "guestbook", "guestbook")
	if _, err := ops.Start(t.Context(), app("ns", "unscripted"), project("ns"), v1alpha1.SyncOperation{Revision: "v9"}, v1alpha1.InitiatedBy{Automated: true}); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, ops, "ns", "unscripted")

	want := []map[string]string{
		{"level": "INFO", "user": "alice", "application": "guestbook/guestbook", "revision": "0123abc",
			"identity": "system:serviceaccount:guestbook:guestbook-deployer", "phase": "Succeeded", "message": "successfully synced",
			"dryRun": "true", "prune": "false", "retryCount": "0"},
		{"level": "INFO", "user": "automated", "application": "ns/unscripted", "revision": "v9",
			"identity": "", "phase": "Failed", "message": "fake runner: no script for ns/unscripted",
			"dryRun": "false", "prune": "false", "retryCount": "0"},
	}
	if diff := cmp.Diff(want, rec.audit()); diff != "" {
		t.Errorf("audit lines (-want +got):\n%s", diff)
	}
}

func TestParallelismBoundsConcurrentOperations(t *testing.T) {
	runner := newFakeRunner()
	release := make(chan struct{})
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		runner.script("ns", n, script{release: release})
	}
	ops, _ := newOps(t, runner, apps.OperationsOptions{Workers: 2})
	for _, n := range names {
		if _, err := ops.Start(t.Context(), app("ns", n), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
			t.Fatal(err)
		}
	}
	// Two run; the other two wait, Running, and say why.
	var waiting []string
	deadline := time.Now().Add(10 * time.Second)
	for len(waiting) < 2 && time.Now().Before(deadline) {
		waiting = waiting[:0]
		for _, n := range names {
			if st, _ := ops.Status("ns", n); st.Phase == v1alpha1.OperationRunning && st.Message == "waiting for a free sync worker (all 2 busy; sync.parallelism)" {
				waiting = append(waiting, n)
			}
		}
		time.Sleep(time.Millisecond)
	}
	if len(waiting) != 2 {
		t.Errorf("waiting operations %v, want 2 of 4", waiting)
	}
	if got := runner.running.Load(); got != 2 {
		t.Errorf("%d operations running, want 2", got)
	}
	close(release)
	for _, n := range names {
		if st := waitFinished(t, ops, "ns", n); st.Phase != v1alpha1.OperationSucceeded {
			t.Errorf("%s: %s %s", n, st.Phase, st.Message)
		}
	}
	if m := runner.maxSeen.Load(); m != 2 {
		t.Errorf("at most %d operations ran at once, want 2", m)
	}
}

func TestRunnerContractViolationsBecomeErrorStates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		runner  syncer.Runner
		wantMsg string
	}{
		{"a panic", syncer.RunnerFunc(func(context.Context, syncer.Request, syncer.Progress) *v1alpha1.OperationState {
			panic("boom")
		}), "the sync engine failed unexpectedly; see deputy's log"},
		{"a nil state", syncer.RunnerFunc(func(context.Context, syncer.Request, syncer.Progress) *v1alpha1.OperationState {
			return nil
		}), "the sync engine returned no result"},
		{"a Running final state", syncer.RunnerFunc(func(context.Context, syncer.Request, syncer.Progress) *v1alpha1.OperationState {
			return &v1alpha1.OperationState{Phase: v1alpha1.OperationRunning, Message: "still going"}
		}), `the sync engine ended the operation in phase "Running": still going`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, rec := newOps(t, tc.runner, apps.OperationsOptions{})
			if _, err := ops.Start(t.Context(), app("ns", "a"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
				t.Fatal(err)
			}
			st := waitFinished(t, ops, "ns", "a")
			if st.Phase != v1alpha1.OperationError || st.Message != tc.wantMsg || st.FinishedAt == nil || st.Operation.Sync == nil {
				t.Errorf("state %+v, want Error %q with operation and finish time", st, tc.wantMsg)
			}
			if n := len(rec.audit()); n != 1 {
				t.Errorf("%d audit lines, want 1", n)
			}
		})
	}
}

type recordingWriter struct {
	mu     sync.Mutex
	phases []string
}

func (w *recordingWriter) WriteOperationState(_ context.Context, ns, name string, st *v1alpha1.OperationState) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.phases = append(w.phases, ns+"/"+name+" "+st.Phase)
	return errors.New("conflict")
}

func TestStatusWriterSeesTheStartAndTheEnd(t *testing.T) {
	runner := newFakeRunner()
	runner.script("ns", "a", script{})
	w := &recordingWriter{}
	ops, rec := newOps(t, runner, apps.OperationsOptions{StatusWriter: w})
	if _, err := ops.Start(t.Context(), app("ns", "a"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, ops, "ns", "a")
	w.mu.Lock()
	defer w.mu.Unlock()
	if diff := cmp.Diff([]string{"ns/a Running", "ns/a Succeeded"}, w.phases); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if got := rec.all(); !strings.Contains(got, "failed to record the operation state") {
		t.Errorf("a failed status write was not logged:\n%s", got)
	}
}

func TestApplicationStatus(t *testing.T) {
	runner := newFakeRunner()
	runner.script("ns", "a", script{resources: []*v1alpha1.ResourceResult{web}})
	ops, _ := newOps(t, runner, apps.OperationsOptions{})
	if st := ops.ApplicationStatus("ns", "a"); st.Sync.Status != v1alpha1.SyncStatusCodeUnknown || st.OperationState != nil {
		t.Errorf("status before any operation: %+v", st)
	}
	if _, err := ops.Start(t.Context(), app("ns", "a"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, ops, "ns", "a")
	st := ops.ApplicationStatus("ns", "a")
	if !reflect.DeepEqual(st.Sync, v1alpha1.SyncStatus{Status: v1alpha1.SyncStatusCodeSynced, Revision: "0123abc"}) || st.OperationState.Phase != v1alpha1.OperationSucceeded {
		t.Errorf("status after a successful sync: %+v", st)
	}
	if _, err := ops.Start(t.Context(), app("ns", "a"), project("ns"), v1alpha1.SyncOperation{DryRun: true}, alice); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, ops, "ns", "a")
	if st := ops.ApplicationStatus("ns", "a"); st.Sync.Status != v1alpha1.SyncStatusCodeUnknown {
		t.Errorf("a dry run says nothing about the live state, got %+v", st.Sync)
	}
}

func TestShutdownCancelsOperationsThatOutlastIt(t *testing.T) {
	runner := newFakeRunner()
	runner.script("ns", "a", script{release: make(chan struct{})}) // never released
	ops := apps.NewOperations(runner, apps.OperationsOptions{})
	if _, err := ops.Start(t.Context(), app("ns", "a"), project("ns"), v1alpha1.SyncOperation{}, alice); err != nil {
		t.Fatal(err)
	}
	runner.waitStarted(t, "ns/a")
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := ops.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want the deadline error after cancelling", err)
	}
	st, _ := ops.Status("ns", "a")
	if st.Phase != v1alpha1.OperationError || st.Message != "cancelled: context canceled" {
		t.Errorf("state %+v, want the runner's cancellation", st)
	}
	if _, err := ops.Start(t.Context(), app("ns", "b"), project("ns"), v1alpha1.SyncOperation{}, alice); !errors.Is(err, apps.ErrShuttingDown) {
		t.Errorf("Start after Shutdown: %v", err)
	}
}

func TestConcurrentStartsAdmitExactlyOne(t *testing.T) {
	runner := newFakeRunner()
	release := make(chan struct{})
	runner.script("ns", "a", script{release: release})
	ops, _ := newOps(t, runner, apps.OperationsOptions{})
	var ok, busy atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, err := ops.Start(context.Background(), app("ns", "a"), project("ns"), v1alpha1.SyncOperation{}, alice)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, apps.ErrOperationInProgress):
				busy.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(release)
	if ok.Load() != 1 || busy.Load() != 15 {
		t.Errorf("%d started, %d refused; want 1 and 15", ok.Load(), busy.Load())
	}
	waitFinished(t, ops, "ns", "a")
}

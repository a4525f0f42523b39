package webhook

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// diffTestRBAC lets dave diff (and only diff) the Applications of
// guestbook; alice may sync and read them, which does not let her diff,
// and send local diffs (create on applications/diff: POST).
var diffTestRBAC = policy.SourceFile{Name: "diff-rbac.yaml", Data: []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: differ, namespace: guestbook}
rules:
- {apiGroups: [deputy.dev], resources: [applications/diff], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dave-diffs, namespace: guestbook}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: differ}
subjects:
- {kind: User, name: dave}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: local-differ, namespace: guestbook}
rules:
- {apiGroups: [deputy.dev], resources: [applications/diff], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-local-diffs, namespace: guestbook}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: local-differ}
subjects:
- {kind: User, name: alice}
`)}

const diffPath = APIPrefix + "/namespaces/guestbook/applications/guestbook/diff"

// fakeDiffer answers guestbook's diff (one update, one unchanged), or err;
// with gate set, each diff waits for it (or its context) after telling
// started.
type fakeDiffer struct {
	err     error
	gate    chan struct{}
	started chan struct{}

	mu   sync.Mutex
	reqs []syncer.DiffRequest
}

func (d *fakeDiffer) Diff(ctx context.Context, req syncer.DiffRequest) (*v1alpha1.ApplicationDiff, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, req)
	d.mu.Unlock()
	if d.gate != nil {
		d.started <- struct{}{}
		select {
		case <-d.gate:
		case <-ctx.Done():
			return nil, fmt.Errorf("dry run of apps/Deployment guestbook/web: %w", ctx.Err())
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return &v1alpha1.ApplicationDiff{Namespace: req.Application.Namespace, Name: req.Application.Name, Revisions: []string{"0123abc"},
		Identity: "system:serviceaccount:guestbook:guestbook-deployer",
		Resources: []v1alpha1.ResourceDiff{
			{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "web", Action: v1alpha1.DiffActionUpdate,
				Diff: "--- live/apps/v1/Deployment/guestbook/web\n+++ target/apps/v1/Deployment/guestbook/web\n@@ -1 +1 @@\n-replicas: 1\n+replicas: 2\n"},
			{Version: "v1", Kind: "Service", Namespace: "guestbook", Name: "web", Action: v1alpha1.DiffActionUnchanged},
		}}, nil
}

func (d *fakeDiffer) requests() []syncer.DiffRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]syncer.DiffRequest(nil), d.reqs...)
}

// newDiffFixture is the API over file-mode Applications whose Differ is
// differ (nil: none), at most workers diffs at once.
func newDiffFixture(t *testing.T, differ syncer.Differ, workers int) *apiFixture {
	t.Helper()
	snap, err := policy.Load(append(append([]policy.SourceFile(nil), apiTestPolicy...), diffTestRBAC))
	if err != nil {
		t.Fatal(err)
	}
	current := func() *policy.Snapshot { return snap }
	return newAPIFixture(t, current, func(_ *APIAuthenticationOptions, o *APIOptions) {
		file := apps.NewFile(apps.FileOptions{Snapshot: current, ProjectNamespaces: []string{"*"}, Runner: &blockingRunner{},
			Differ: differ, Workers: workers})
		t.Cleanup(func() { _ = file.Shutdown(context.Background()) })
		o.Applications = file
	})
}

func TestAPIDiffAuthorization(t *testing.T) {
	f := newDiffFixture(t, &fakeDiffer{}, 0)
	for _, tc := range []struct {
		name, path, token string
		want              int
		message           string
	}{
		{"get applications and create applications/sync do not let alice diff", diffPath, aliceAPIToken, 403,
			`User \"alice\" cannot get resource \"applications/diff\" in API group \"deputy.dev\" in the namespace \"guestbook\"`},
		{"bob may do nothing", diffPath, bobAPIToken, 403, `User \"bob\" cannot get resource \"applications/diff\"`},
		{"get applications/diff lets dave diff", diffPath, daveAPIToken, 200, `"kind":"ApplicationDiff"`},
		{"through the aggregated group as well", "/apis/sync.deputy.dev/v1alpha1/namespaces/guestbook/applications/guestbook/diff", daveAPIToken, 200, `"kind":"ApplicationDiff"`},
		{"get applications/diff does not let dave read the Application", appPath, daveAPIToken, 403, `cannot get resource \"applications\"`},
		{"nor in another namespace", APIPrefix + "/namespaces/public/applications/board/diff", daveAPIToken, 403, `cannot get resource \"applications/diff\"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.do(t, http.MethodGet, tc.path, tc.token, "", "")
			if resp.code != tc.want || !strings.Contains(resp.body, tc.message) {
				t.Errorf("code %d, want %d with %s: %s", resp.code, tc.want, tc.message, resp.body)
			}
		})
	}
	if resp := f.do(t, http.MethodPost, diffPath, daveAPIToken, "", ""); resp.code != http.StatusForbidden || !strings.Contains(resp.body, `cannot create resource \"applications/diff\"`) {
		t.Errorf("POST diff: %d %s", resp.code, resp.body)
	}
}

func TestAPIDiffAnswersTheApplicationDiff(t *testing.T) {
	differ := &fakeDiffer{}
	f := newDiffFixture(t, differ, 0)
	resp := f.do(t, http.MethodGet, diffPath+"?revision=v2", daveAPIToken, "", "")
	if resp.code != http.StatusOK || resp.header.Get("Content-Type") != "application/json" {
		t.Fatalf("code %d (%s): %s", resp.code, resp.header.Get("Content-Type"), resp.body)
	}
	var shape map[string]any
	if err := json.Unmarshal([]byte(resp.body), &shape); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"apiVersion": "deputy.dev/v1alpha1", "kind": "ApplicationDiff", "namespace": "guestbook", "name": "guestbook",
		"identity": "system:serviceaccount:guestbook:guestbook-deployer"} {
		if shape[k] != want {
			t.Errorf("%s = %v, want %v", k, shape[k], want)
		}
	}
	var d v1alpha1.ApplicationDiff
	if err := json.Unmarshal([]byte(resp.body), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Resources) != 2 || d.Resources[0].Action != "update" || !strings.Contains(d.Resources[0].Diff, "+replicas: 2") || !d.Changed() {
		t.Errorf("resources %+v", d.Resources)
	}
	reqs := differ.requests()
	if len(reqs) != 1 || reqs[0].Application.Name != "guestbook" || reqs[0].Project.Name != "guestbook" || reqs[0].Sync.Revision != "v2" {
		t.Errorf("requests %+v", reqs)
	}
	if f.ops.Running("guestbook", "guestbook") {
		t.Error("a diff started a sync")
	}
	if !strings.Contains(f.logs.String(), `"msg":"diff"`) || !strings.Contains(f.logs.String(), `"changed":true`) {
		t.Errorf("no diff log line:\n%s", f.logs.String())
	}
}

func TestAPIDiffErrors(t *testing.T) {
	unreachable := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	for _, tc := range []struct {
		name   string
		differ syncer.Differ
		path   string
		want   int
		reason string
		msg    string
	}{
		{"an unknown Application is 404", &fakeDiffer{}, APIPrefix + "/namespaces/guestbook/applications/nope/diff", 404, "NotFound", `applications.deputy.dev "nope" not found`},
		{"an Application without a usable project is 422", &fakeDiffer{}, APIPrefix + "/namespaces/guestbook/applications/orphan/diff", 422, "Invalid", `AppProject "missing"`},
		{"revisions for spec.source is 422", &fakeDiffer{}, diffPath + "?revisions=a", 422, "Invalid", "send revision"},
		{"an unknown parameter is 400", &fakeDiffer{}, diffPath + "?revison=v2", 400, "BadRequest", `unknown query parameter "revison"`},
		{"revision twice is 400", &fakeDiffer{}, diffPath + "?revision=a&revision=b", 400, "BadRequest", "revision is given 2 times"},
		{"a revision with blanks is 400", &fakeDiffer{}, diffPath + "?revision=a%20b", 400, "BadRequest", "contains blanks"},
		{"a source that does not render is 422 with the engine's message", &fakeDiffer{err: errors.New(`kustomize build of "guestbook" failed: missing kustomization.yaml`)},
			diffPath, 422, "Invalid", "missing kustomization.yaml"},
		{"an unreachable destination is 503", &fakeDiffer{err: fmt.Errorf("dry run of apps/Deployment guestbook/web: %w", unreachable)}, diffPath, 503, "ServiceUnavailable",
			"the destination is unavailable: dry run of apps/Deployment guestbook/web: dial tcp: connect: connection refused"},
		{"a diff past the operation timeout is 504", &fakeDiffer{err: fmt.Errorf("rendering: %w", context.DeadlineExceeded)}, diffPath, 504, "Timeout", "sync.limits.operationTimeout"},
		{"no engine is 503", nil, diffPath, 503, "ServiceUnavailable", "diff not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDiffFixture(t, tc.differ, 0)
			resp := f.do(t, http.MethodGet, tc.path, daveAPIToken, "", "")
			if resp.code != tc.want {
				t.Fatalf("code %d, want %d: %s", resp.code, tc.want, resp.body)
			}
			if st := resp.status(t); string(st.Reason) != tc.reason || !strings.Contains(st.Message, tc.msg) {
				t.Errorf("status %s %q, want %s with %q", st.Reason, st.Message, tc.reason, tc.msg)
			}
		})
	}
}

func TestAPIDiffIsBoundedWith429AndRetryAfter(t *testing.T) {
	differ := &fakeDiffer{gate: make(chan struct{}), started: make(chan struct{}, 2)}
	f := newDiffFixture(t, differ, 1)
	first := make(chan apiResponse, 1)
	go func() { first <- f.do(t, http.MethodGet, diffPath, daveAPIToken, "", "") }()
	<-differ.started
	resp := f.do(t, http.MethodGet, diffPath, daveAPIToken, "", "")
	if resp.code != http.StatusTooManyRequests || resp.header.Get("Retry-After") != "5" {
		t.Fatalf("second diff: code %d, Retry-After %q: %s", resp.code, resp.header.Get("Retry-After"), resp.body)
	}
	if st := resp.status(t); st.Reason != "TooManyRequests" || st.Details == nil || st.Details.RetryAfterSeconds != 5 || !strings.Contains(st.Message, "sync.parallelism") {
		t.Errorf("status %+v", st)
	}
	close(differ.gate)
	if r := <-first; r.code != http.StatusOK {
		t.Errorf("first diff: %d %s", r.code, r.body)
	}
	if r := f.do(t, http.MethodGet, diffPath, daveAPIToken, "", ""); r.code != http.StatusOK {
		t.Errorf("a diff once the first ended: %d %s", r.code, r.body)
	}
}

func TestAPIDiffIsCancelledWhenTheServerDrains(t *testing.T) {
	differ := &fakeDiffer{gate: make(chan struct{}), started: make(chan struct{}, 2)}
	f := newDiffFixture(t, differ, 0)
	done := make(chan apiResponse, 1)
	go func() { done <- f.do(t, http.MethodGet, diffPath, daveAPIToken, "", "") }()
	<-differ.started
	f.handler.CloseStreams()
	select {
	case resp := <-done:
		if resp.code != http.StatusServiceUnavailable || !strings.Contains(resp.body, "cancelled") {
			t.Errorf("diff: %d %s", resp.code, resp.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the diff did not end when the server drained")
	}
	if resp := f.do(t, http.MethodGet, diffPath, daveAPIToken, "", ""); resp.code != http.StatusServiceUnavailable || !strings.Contains(resp.body, "shutting down") {
		t.Errorf("a diff while draining: %d %s", resp.code, resp.body)
	}
}

// TestAPIDiffOutlivesTheServerWriteTimeout: a diff may take up to
// sync.limits.operationTimeout, longer than the server's WriteTimeout; here
// the timeout is 200ms and the diff 1s, over HTTP/1.1 and HTTP/2 (where
// the timeout resets the stream).
func TestAPIDiffOutlivesTheServerWriteTimeout(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("HTTP/2 %v", h2), func(t *testing.T) {
			differ := &fakeDiffer{gate: make(chan struct{}), started: make(chan struct{}, 1)}
			f := newDiffFixture(t, differ, 0)
			srv := httptest.NewUnstartedServer(f.handler)
			srv.Config.WriteTimeout = 200 * time.Millisecond
			srv.EnableHTTP2 = h2
			srv.StartTLS()
			defer srv.Close()
			caFile := filepath.Join(t.TempDir(), "ca.crt")
			if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
				t.Fatal(err)
			}
			go func() {
				<-differ.started
				time.Sleep(time.Second)
				close(differ.gate)
			}()
			client, err := apiclient.New(apiclient.Options{Server: srv.URL, Token: daveAPIToken, CAFile: caFile})
			if err != nil {
				t.Fatal(err)
			}
			d, err := client.Diff(t.Context(), "guestbook", "guestbook", v1alpha1.SyncOperation{})
			if err != nil || len(d.Resources) != 2 {
				t.Fatalf("diff across the write timeout: %+v, %v", d, err)
			}
		})
	}
}

func TestAPIDiscoveryListsDiff(t *testing.T) {
	f := newAPIFixture(t, nil)
	resp := f.do(t, http.MethodGet, APIPrefix, bobAPIToken, "", "")
	var list struct {
		Resources []struct {
			Name  string   `json:"name"`
			Kind  string   `json:"kind"`
			Verbs []string `json:"verbs"`
		} `json:"resources"`
	}
	if err := json.Unmarshal([]byte(resp.body), &list); err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Resources {
		if r.Name == "applications/diff" {
			if r.Kind != v1alpha1.KindApplicationDiff || strings.Join(r.Verbs, ",") != "get,create" {
				t.Errorf("applications/diff %+v", r)
			}
			return
		}
	}
	t.Errorf("discovery lacks applications/diff: %s", resp.body)
}

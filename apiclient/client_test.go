package apiclient_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/policy/v1alpha1"
)

func TestNewRefusesWhatIsNotDeputysURL(t *testing.T) {
	for _, server := range []string{"", "127.0.0.1:8443", "ftp://deputy", "https://"} {
		if _, err := apiclient.New(apiclient.Options{Server: server}); err == nil || !strings.Contains(err.Error(), "must be deputy's URL") {
			t.Errorf("server %q: err = %v", server, err)
		}
	}
}

func TestSyncSendsTheOperationAndTheToken(t *testing.T) {
	var got struct {
		method, path, auth, accept string
		op                         v1alpha1.SyncOperation
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.method, got.path, got.auth, got.accept = r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Accept")
		_ = json.NewDecoder(r.Body).Decode(&got.op)
		_ = json.NewEncoder(w).Encode(v1alpha1.OperationState{Phase: v1alpha1.OperationRunning})
	}))
	defer srv.Close()
	c, err := apiclient.New(apiclient.Options{Server: srv.URL, Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Sync(t.Context(), "team-a", "web", v1alpha1.SyncOperation{Revision: "main", Prune: true})
	if err != nil || st.Phase != v1alpha1.OperationRunning {
		t.Fatalf("Sync = %+v, %v", st, err)
	}
	if got.method != http.MethodPost || got.path != v1alpha1.APIPath+"/namespaces/team-a/applications/web/sync" {
		t.Errorf("request %s %s", got.method, got.path)
	}
	if got.auth != "Bearer t0ken" || !strings.Contains(got.accept, v1alpha1.OperationStreamContentType) {
		t.Errorf("headers Authorization %q, Accept %q", got.auth, got.accept)
	}
	if got.op.Revision != "main" || !got.op.Prune {
		t.Errorf("operation sent %+v", got.op)
	}
}

func TestRefusalsAreStatusErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"deputy's Status is kept as it is", `{"kind":"Status","status":"Failure","code":403,"message":"forbidden: bob"}`, 403, "forbidden: bob"},
		{"another body is quoted with the status line", "upstream proxy broke\n", 502, "deputy answered 502 Bad Gateway: upstream proxy broke"},
		{"an empty body gets the status text", "", 404, "deputy answered 404 Not Found: Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.code)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			c, err := apiclient.New(apiclient.Options{Server: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Sync(t.Context(), "ns", "app", v1alpha1.SyncOperation{})
			var se *apiclient.StatusError
			if !errors.As(err, &se) || se.Status.Message != tc.want || int(se.Status.Code) != tc.code {
				t.Fatalf("err = %#v, want a StatusError %d %q", err, tc.code, tc.want)
			}
		})
	}
}

func TestWatchReturnsTheFinalState(t *testing.T) {
	stream := func(events ...v1alpha1.OperationEvent) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("watch") != "true" {
				http.Error(w, "not a watch", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", v1alpha1.OperationStreamContentType)
			enc := json.NewEncoder(w)
			for _, ev := range events {
				_ = enc.Encode(ev)
			}
		})
	}
	running := &v1alpha1.OperationState{Phase: v1alpha1.OperationRunning}
	done := &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded}
	res := &v1alpha1.ResourceResult{Kind: "ConfigMap", Name: "a", Status: "Synced"}
	for _, tc := range []struct {
		name      string
		events    []v1alpha1.OperationEvent
		wantPhase string
		wantErr   error
		wantSeen  int
	}{
		{"a stream that ends with a final state returns it", []v1alpha1.OperationEvent{
			{Type: v1alpha1.OperationEventState, State: running},
			{Type: v1alpha1.OperationEventResource, Resource: res},
			{Type: v1alpha1.OperationEventState, State: done},
		}, v1alpha1.OperationSucceeded, nil, 3},
		{"a stream cut while running is ErrWatchEnded", []v1alpha1.OperationEvent{
			{Type: v1alpha1.OperationEventState, State: running},
		}, v1alpha1.OperationRunning, apiclient.ErrWatchEnded, 1},
		{"an empty stream is ErrWatchEnded", nil, "", apiclient.ErrWatchEnded, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(stream(tc.events...))
			defer srv.Close()
			c, err := apiclient.New(apiclient.Options{Server: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			final, err := c.Watch(t.Context(), "ns", "app", func(v1alpha1.OperationEvent) error { seen++; return nil })
			if !errors.Is(err, tc.wantErr) || seen != tc.wantSeen {
				t.Fatalf("err = %v (want %v), %d events seen (want %d)", err, tc.wantErr, seen, tc.wantSeen)
			}
			phase := ""
			if final != nil {
				phase = final.Phase
			}
			if phase != tc.wantPhase {
				t.Errorf("final phase %q, want %q", phase, tc.wantPhase)
			}
		})
	}
}

func TestAnUntrustedServingCertificateIsACertificateError(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	c, err := apiclient.New(apiclient.Options{Server: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Sync(t.Context(), "ns", "app", v1alpha1.SyncOperation{})
	var ce *apiclient.CertificateError
	if !errors.As(err, &ce) || !ce.UnknownAuthority() || ce.Server != srv.URL || ce.CAFile != "" {
		t.Fatalf("err = %#v, want a CertificateError of an unknown authority", err)
	}
	if !strings.Contains(err.Error(), "does not verify with the system's trusted CAs") {
		t.Errorf("message %q", err)
	}
}

func TestApplicationReadsTheStatus(t *testing.T) {
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.Method + " " + r.URL.Path
		_ = json.NewEncoder(w).Encode(v1alpha1.Application{Status: v1alpha1.ApplicationStatus{Health: v1alpha1.HealthStatus{Status: v1alpha1.HealthStatusDegraded}}})
	}))
	defer srv.Close()
	c, err := apiclient.New(apiclient.Options{Server: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	app, err := c.Application(t.Context(), "team-a", "web")
	if err != nil || app.Status.Health.Status != v1alpha1.HealthStatusDegraded {
		t.Fatalf("Application = %+v, %v", app, err)
	}
	if path != "GET "+v1alpha1.APIPath+"/namespaces/team-a/applications/web" {
		t.Errorf("request %s", path)
	}
}

func TestDiffSendsTheRevisionsAndDecodesTheAnswer(t *testing.T) {
	var method, path string
	var query map[string][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, path, query = r.Method, r.URL.Path, r.URL.Query()
		_, _ = fmt.Fprint(w, `{"apiVersion":"deputy.dev/v1alpha1","kind":"ApplicationDiff","namespace":"team-a","name":"web","revisions":["0123abc","4567def"],
			"resources":[{"group":"apps","version":"v1","kind":"Deployment","namespace":"team-a","name":"web","action":"update","diff":"--- live\n+++ target\n"}]}`)
	}))
	defer srv.Close()
	c, err := apiclient.New(apiclient.Options{Server: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Diff(t.Context(), "team-a", "web", v1alpha1.SyncOperation{Revisions: []string{"", "v2"}, Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet || path != v1alpha1.APIPath+"/namespaces/team-a/applications/web/diff" {
		t.Errorf("request %s %s", method, path)
	}
	if got := query["revisions"]; len(query) != 1 || len(got) != 2 || got[0] != "" || got[1] != "v2" {
		t.Errorf("query %v, want revisions=&revisions=v2 in order and nothing else", query)
	}
	if d.Kind != v1alpha1.KindApplicationDiff || len(d.Resources) != 1 || d.Resources[0].Action != v1alpha1.DiffActionUpdate || !d.Changed() {
		t.Errorf("diff %+v", d)
	}
	if _, err := c.Diff(t.Context(), "team-a", "web", v1alpha1.SyncOperation{Revision: "main"}); err != nil || len(query["revision"]) != 1 || query["revision"][0] != "main" {
		t.Errorf("revision: query %v, err %v", query, err)
	}
	if _, err := c.Diff(t.Context(), "team-a", "web", v1alpha1.SyncOperation{}); err != nil || len(query) != 0 {
		t.Errorf("no revision: query %v, err %v", query, err)
	}
}

func TestDiffRefusalsAreStatusErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":429,"reason":"TooManyRequests","message":"too many diffs in progress","details":{"retryAfterSeconds":5}}`)
	}))
	defer srv.Close()
	c, err := apiclient.New(apiclient.Options{Server: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Diff(t.Context(), "ns", "app", v1alpha1.SyncOperation{})
	var se *apiclient.StatusError
	if !errors.As(err, &se) || se.Status.Code != 429 || se.Status.Details == nil || se.Status.Details.RetryAfterSeconds != 5 {
		t.Fatalf("err = %#v, want a StatusError 429 with retryAfterSeconds", err)
	}
}

func TestDiffLocalPostsTheObjects(t *testing.T) {
	var method, path, contentType string
	var body map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, path, contentType = r.Method, r.URL.Path+"?"+r.URL.RawQuery, r.Header.Get("Content-Type")
		body = nil
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		_, _ = fmt.Fprint(w, `{"apiVersion":"deputy.dev/v1alpha1","kind":"ApplicationDiff","namespace":"team-a","name":"web",
			"resources":[{"version":"v1","kind":"ConfigMap","namespace":"team-a","name":"c","action":"create"}]}`)
	}))
	defer srv.Close()
	c, err := apiclient.New(apiclient.Options{Server: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"n": int64(9007199254740993)}}
	d, err := c.DiffLocal(t.Context(), "team-a", "web", []map[string]any{cm})
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodPost || path != v1alpha1.APIPath+"/namespaces/team-a/applications/web/diff?" || contentType != "application/json" {
		t.Errorf("request %s %s (%s)", method, path, contentType)
	}
	if objs, ok := body["objects"].([]any); !ok || len(objs) != 1 || len(body) != 1 || objs[0].(map[string]any)["kind"] != "ConfigMap" {
		t.Errorf("body %v", body)
	}
	if len(d.Resources) != 1 || d.Resources[0].Action != v1alpha1.DiffActionCreate || len(d.Revisions) != 0 {
		t.Errorf("diff %+v", d)
	}
	// No objects is sent as an empty list (deputy answers 400), never null.
	if _, err := c.DiffLocal(t.Context(), "team-a", "web", nil); err != nil || fmt.Sprint(body["objects"]) != "[]" {
		t.Errorf("no objects: body %v, %v", body, err)
	}
	// Manifests above deputy's limit are refused before they are sent.
	method = ""
	huge := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"a": strings.Repeat("x", v1alpha1.MaxLocalDiffRequestBytes)}}
	if _, err := c.DiffLocal(t.Context(), "team-a", "web", []map[string]any{huge}); err == nil || !strings.Contains(err.Error(), "more than deputy's limit") || method != "" {
		t.Errorf("huge: %v (sent: %q)", err, method)
	}
}

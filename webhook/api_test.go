package webhook

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/union"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/apps"
	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/tokenreview"
)

// Tokens of the API test policy; the test checks they never reach the log.
const (
	aliceAPIToken = "alice-secret-token-0001"
	bobAPIToken   = "bob-secret-token-0002"
	daveAPIToken  = "dave-secret-token-0003"
)

// apiTestPolicy: alice may sync and read Applications in guestbook (a Role
// bound to her); everyone authenticated may read Applications in public (a
// binding to system:authenticated); bob may do nothing; the group deployers
// (client certificates with O=deployers) may sync in guestbook.
var apiTestPolicy = []policy.SourceFile{
	{Name: "apps.yaml", Data: []byte(`apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: guestbook, namespace: guestbook}
spec:
  sourceRepos: ["*"]
  destinations: [{server: https://kubernetes.default.svc, namespace: guestbook}]
  destinationServiceAccounts: [{server: https://kubernetes.default.svc, namespace: guestbook, defaultServiceAccount: guestbook-deployer}]
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: guestbook, namespace: guestbook}
spec:
  project: guestbook
  source: {repoURL: https://example.test/guestbook.git, path: guestbook}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: orphan, namespace: guestbook}
spec:
  project: missing
  source: {repoURL: https://example.test/guestbook.git}
  destination: {server: https://kubernetes.default.svc}
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: board, namespace: public}
spec:
  project: guestbook
  source: {repoURL: https://example.test/board.git}
  destination: {server: https://kubernetes.default.svc}
`)},
	{Name: "rbac.yaml", Data: []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: application-syncer}
rules:
- apiGroups: [deputy.dev]
  resources: [applications/sync]
  verbs: [create]
- apiGroups: [deputy.dev]
  resources: [applications]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: guestbook-syncers, namespace: guestbook}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: application-syncer}
subjects:
- {kind: User, name: alice}
- {kind: Group, name: deployers}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: application-viewer}
rules:
- apiGroups: [deputy.dev]
  resources: [applications]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: everyone-views, namespace: public}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: application-viewer}
subjects:
- {kind: Group, name: "system:authenticated"}
`)},
	{Name: "tokens.csv", Data: []byte(aliceAPIToken + ",alice,alice-uid\n" + bobAPIToken + ",bob,bob-uid\n" + daveAPIToken + ",dave,dave-uid\n")},
}

// blockingRunner reports two resources, then waits for release (or its
// context) and succeeds as the guestbook deployer.
type blockingRunner struct {
	release chan struct{}
	started chan string
}

func (b *blockingRunner) Run(ctx context.Context, req syncer.Request, progress syncer.Progress) *v1alpha1.OperationState {
	b.started <- req.Application.Namespace + "/" + req.Application.Name
	progress(&v1alpha1.OperationState{Phase: v1alpha1.OperationRunning, Identity: "system:serviceaccount:guestbook:guestbook-deployer"}, nil)
	web := &v1alpha1.ResourceResult{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "web", Status: v1alpha1.ResultCodeSynced}
	svc := &v1alpha1.ResourceResult{Version: "v1", Kind: "Service", Namespace: "guestbook", Name: "web", Status: v1alpha1.ResultCodeSynced}
	progress(nil, web)
	progress(nil, svc)
	select {
	case <-b.release:
	case <-ctx.Done():
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationError, Message: "cancelled"}
	}
	return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, Message: "successfully synced",
		Identity:   "system:serviceaccount:guestbook:guestbook-deployer",
		SyncResult: &v1alpha1.SyncOperationResult{Revision: "0123abc", Resources: []*v1alpha1.ResourceResult{web, svc}}}
}

type apiFixture struct {
	handler *APIHandler
	ops     *apps.File
	runner  *blockingRunner
	logs    *syncBuffer
	ca      *testCA
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// apiFixtureOption changes the fixture's authentication or API options
// before the handler is built.
type apiFixtureOption func(a *APIAuthenticationOptions, o *APIOptions)

func newAPIFixture(t *testing.T, snap func() *policy.Snapshot, options ...apiFixtureOption) *apiFixture {
	t.Helper()
	if snap == nil {
		s, err := policy.Load(apiTestPolicy)
		if err != nil {
			t.Fatal(err)
		}
		snap = func() *policy.Snapshot { return s }
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runner := &blockingRunner{release: make(chan struct{}), started: make(chan string, 10)}
	ops := apps.NewFile(apps.FileOptions{Snapshot: snap, ProjectNamespaces: []string{"*"}, Runner: runner, Logger: log})
	t.Cleanup(func() {
		select {
		case <-runner.release:
		default:
			close(runner.release)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ops.Shutdown(ctx)
		for _, tok := range []string{aliceAPIToken, bobAPIToken, daveAPIToken} {
			if strings.Contains(logs.String(), tok) {
				t.Errorf("a token reached the log:\n%s", logs.String())
			}
		}
	})
	authz, err := deputyauthz.New(deputyauthz.Options{Default: deputyauthz.DefaultDeny},
		union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: deputyauthz.NewRBAC(snap)})
	if err != nil {
		t.Fatal(err)
	}
	auds := []string{"https://kubernetes.default.svc.cluster.local"}
	ca := newTestCA(t, "api-client-ca")
	verify := newSwitchableVerifier(ca.pool())
	apiAuthz, err := NewAPIAuthorizer(NewProjectScopeAuthorizer(ops), authz, nil)
	if err != nil {
		t.Fatal(err)
	}
	authnOpts := APIAuthenticationOptions{
		Tokens:   tokenreview.NewChain(auds, func() *policy.TokenSet { return snap().TokenSetOf() }),
		ClientCA: verify.VerifyOptions,
	}
	apiOpts := APIOptions{
		APIAudiences:    auds,
		Authorizer:      apiAuthz,
		AggregatedGroup: "sync.deputy.dev",
		Ready: func() error {
			if snap() == nil {
				return policy.ErrNotLoaded
			}
			return nil
		},
		Applications: ops,
		Log:          log,
	}
	for _, o := range options {
		o(&authnOpts, &apiOpts)
	}
	apiOpts.Authenticator = NewAPIAuthenticator(authnOpts)
	h := NewAPIHandler(apiOpts)
	return &apiFixture{handler: h, ops: ops, runner: runner, logs: logs, ca: ca}
}

type apiResponse struct {
	code   int
	header http.Header
	body   string
}

func (r apiResponse) status(t *testing.T) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal([]byte(r.body), &st); err != nil || st.Kind != "Status" || st.APIVersion != "v1" {
		t.Fatalf("response is not a metav1.Status (%v): %s", err, r.body)
	}
	return st
}

// do serves one request in process; token "" sends none.
func (f *apiFixture) do(t *testing.T, method, path, token, contentType, body string, mutate ...func(*http.Request)) apiResponse {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for _, m := range mutate {
		m(req)
	}
	rec := httptest.NewRecorder()
	withRequestID(f.handler).ServeHTTP(rec, req)
	if got := req.Header.Get("Authorization"); got != "" {
		t.Errorf("the Authorization header survived authentication: %q", got)
	}
	return apiResponse{code: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

const (
	syncPath  = APIPrefix + "/namespaces/guestbook/applications/guestbook/sync"
	appPath   = APIPrefix + "/namespaces/guestbook/applications/guestbook"
	jsonCType = "application/json"
)

func TestAPIAuthentication(t *testing.T) {
	f := newAPIFixture(t, nil)
	for _, tc := range []struct {
		name  string
		token string
		mut   []func(*http.Request)
	}{
		{name: "an anonymous caller is unauthorized"},
		{name: "an unknown token is unauthorized", token: "not-a-known-token"},
		{name: "a basic-auth header is unauthorized", mut: []func(*http.Request){func(r *http.Request) { r.SetBasicAuth("alice", "pw") }}},
		{name: "a client certificate from another CA is unauthorized", mut: []func(*http.Request){withClientCert(t, newTestCA(t, "other"), "alice", nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.do(t, http.MethodPost, syncPath, tc.token, "", "", tc.mut...)
			if resp.code != http.StatusUnauthorized {
				t.Fatalf("code %d, want 401: %s", resp.code, resp.body)
			}
			st := resp.status(t)
			if st.Reason != metav1.StatusReasonUnauthorized || st.Code != 401 || !strings.HasPrefix(st.Message, "Unauthorized") {
				t.Errorf("status %+v", st)
			}
		})
	}
	if f.ops.Running("guestbook", "guestbook") {
		t.Error("an unauthenticated request started a sync")
	}
	// Unknown paths are authenticated first too, as in kube-apiserver.
	if resp := f.do(t, http.MethodGet, APIPrefix+"/namespaces/guestbook/widgets", "", "", ""); resp.code != http.StatusUnauthorized {
		t.Errorf("unknown path, anonymous: code %d, want 401", resp.code)
	}
}

// withClientCert makes the request arrive over TLS with a client certificate
// issued by ca (common name cn, organizations groups).
func withClientCert(t *testing.T, ca *testCA, cn string, groups []string) func(*http.Request) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1000 + serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return func(r *http.Request) {
		r.TLS = &tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{leaf}}
	}
}

func TestAPIAuthorization(t *testing.T) {
	f := newAPIFixture(t, nil)
	for _, tc := range []struct {
		name        string
		method      string
		path        string
		token       string
		wantCode    int
		wantMessage string
	}{
		{
			name: "a user without a binding may not sync", method: http.MethodPost, path: syncPath, token: bobAPIToken, wantCode: 403,
			wantMessage: `applications.deputy.dev "guestbook" is forbidden: User "bob" cannot create resource "applications/sync" in API group "deputy.dev" in the namespace "guestbook": deputy: no policy rule allows this request; no binding applies to User "bob" (groups ["system:authenticated"]) cluster-wide or in namespace "guestbook"`,
		},
		{
			name: "a user without a binding may not read", method: http.MethodGet, path: appPath, token: bobAPIToken, wantCode: 403,
			wantMessage: `applications.deputy.dev "guestbook" is forbidden: User "bob" cannot get resource "applications" in API group "deputy.dev" in the namespace "guestbook": deputy: no policy rule allows this request; no binding applies to User "bob" (groups ["system:authenticated"]) cluster-wide or in namespace "guestbook"`,
		},
		{
			name: "a RoleBinding in another namespace does not count", method: http.MethodPost, path: APIPrefix + "/namespaces/public/applications/board/sync", token: aliceAPIToken, wantCode: 403,
			wantMessage: `applications.deputy.dev "board" is forbidden: User "alice" cannot create resource "applications/sync" in API group "deputy.dev" in the namespace "public": deputy: no policy rule allows this request; closest: RoleBinding "everyone-views/public" of ClusterRole "application-viewer" to Group "system:authenticated" has {APIGroups:["deputy.dev"], Resources:["applications"], Verbs:["get"]}, which lacks resource "applications/sync" and verb "create"`,
		},
		{
			name: "authorization comes before the existence check (no leak of names)", method: http.MethodGet, path: APIPrefix + "/namespaces/secret/applications/nope", token: bobAPIToken, wantCode: 403,
			wantMessage: `applications.deputy.dev "nope" is forbidden: User "bob" cannot get resource "applications" in API group "deputy.dev" in the namespace "secret": deputy: no policy rule allows this request; no binding applies to User "bob" (groups ["system:authenticated"]) cluster-wide or in namespace "secret"`,
		},
		{
			name: "system:authenticated is added to every user", method: http.MethodGet, path: APIPrefix + "/namespaces/public/applications/board", token: daveAPIToken, wantCode: 200,
		},
		{
			name: "an allowed user gets 404 for an unknown Application", method: http.MethodPost, path: APIPrefix + "/namespaces/guestbook/applications/nope/sync", token: aliceAPIToken, wantCode: 404,
			wantMessage: `applications.deputy.dev "nope" not found`,
		},
		{
			name: "an Application whose AppProject is missing cannot sync", method: http.MethodPost, path: APIPrefix + "/namespaces/guestbook/applications/orphan/sync", token: aliceAPIToken, wantCode: 422,
			wantMessage: `Application "guestbook/orphan" references AppProject "missing", which does not exist in its namespace: create a deputy.dev AppProject named "missing" in namespace "guestbook"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.do(t, tc.method, tc.path, tc.token, "", "")
			if resp.code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", resp.code, tc.wantCode, resp.body)
			}
			if tc.wantMessage == "" {
				return
			}
			st := resp.status(t)
			if st.Message != tc.wantMessage {
				t.Errorf("message\n got %s\nwant %s", st.Message, tc.wantMessage)
			}
			if tc.wantCode == 403 && (st.Reason != metav1.StatusReasonForbidden || st.Details == nil || st.Details.Group != "deputy.dev" || st.Details.Kind != "applications") {
				t.Errorf("status %+v, want reason Forbidden with details of applications.deputy.dev", st)
			}
		})
	}
	if f.ops.Running("public", "board") || f.ops.Running("guestbook", "guestbook") {
		t.Error("a refused request started a sync")
	}
}

func TestAPISyncStartsOnceAndConflictsWhileRunning(t *testing.T) {
	f := newAPIFixture(t, nil)
	resp := f.do(t, http.MethodPost, syncPath, aliceAPIToken, jsonCType, `{"revision":"v2","prune":true,"dryRun":false}`)
	if resp.code != http.StatusAccepted {
		t.Fatalf("code %d, want 202: %s", resp.code, resp.body)
	}
	var st v1alpha1.OperationState
	if err := json.Unmarshal([]byte(resp.body), &st); err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.Operation{Sync: &v1alpha1.SyncOperation{Revision: "v2", Prune: true}, InitiatedBy: v1alpha1.InitiatedBy{Username: "alice"}}
	if st.Phase != v1alpha1.OperationRunning || cmp.Diff(want, st.Operation) != "" {
		t.Errorf("202 body %+v, want Running with %+v", st, want)
	}
	<-f.runner.started

	resp = f.do(t, http.MethodPost, syncPath, aliceAPIToken, "", "")
	if resp.code != http.StatusConflict {
		t.Fatalf("second sync: code %d, want 409: %s", resp.code, resp.body)
	}
	if s := resp.status(t); s.Reason != metav1.StatusReasonConflict ||
		s.Message != `Operation cannot be fulfilled on applications.deputy.dev "guestbook": another operation is already in progress` {
		t.Errorf("409 status %+v", s)
	}

	// A client certificate of the deputy CA with O=deployers may sync too
	// (another Application, the same binding).
	resp = f.do(t, http.MethodPost, APIPrefix+"/namespaces/guestbook/applications/orphan/sync", "", "", "", withClientCert(t, f.ca, "ci-robot", []string{"deployers"}))
	if resp.code != http.StatusUnprocessableEntity {
		t.Errorf("client certificate caller: code %d, want 422 (authenticated and authorized, then the missing project): %s", resp.code, resp.body)
	}

	// While running, GET shows the operation and the Running state.
	resp = f.do(t, http.MethodGet, appPath, aliceAPIToken, "", "")
	var app v1alpha1.Application
	if err := json.Unmarshal([]byte(resp.body), &app); err != nil || resp.code != 200 {
		t.Fatalf("GET: %d %v %s", resp.code, err, resp.body)
	}
	if app.APIVersion != "deputy.dev/v1alpha1" || app.Kind != "Application" || app.Operation == nil ||
		app.Status.OperationState == nil || app.Status.OperationState.Phase != v1alpha1.OperationRunning {
		t.Errorf("GET while running: %+v", app)
	}

	close(f.runner.release)
	deadline := time.Now().Add(10 * time.Second)
	for f.ops.Running("guestbook", "guestbook") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	resp = f.do(t, http.MethodGet, appPath, aliceAPIToken, "", "")
	app = v1alpha1.Application{}
	if err := json.Unmarshal([]byte(resp.body), &app); err != nil {
		t.Fatal(err)
	}
	if app.Operation != nil || app.Status.Sync.Status != v1alpha1.SyncStatusCodeSynced || app.Status.OperationState.Phase != v1alpha1.OperationSucceeded ||
		app.Spec.Source.RepoURL != "https://example.test/guestbook.git" {
		t.Errorf("GET after the sync: %+v", app)
	}
	// The audit line names alice, never her token.
	if logs := f.logs.String(); !strings.Contains(logs, `"msg":"sync operation","user":"alice","application":"guestbook/guestbook","revision":"0123abc","identity":"system:serviceaccount:guestbook:guestbook-deployer","phase":"Succeeded"`) {
		t.Errorf("no audit line for alice's sync:\n%s", logs)
	}
}

func TestAPISyncBodyValidation(t *testing.T) {
	f := newAPIFixture(t, nil)
	for _, tc := range []struct {
		name        string
		contentType string
		body        string
		wantCode    int
		wantMessage string
	}{
		{"an unknown field is rejected", jsonCType, `{"revision":"","prune":false,"dryRun":false,"force":true}`, 400, `invalid sync request: unknown field "force"`},
		{"a wrong-case field is rejected", jsonCType, `{"DryRun":true}`, 400, `invalid sync request: unknown field "DryRun"`},
		{"a duplicate field is rejected", jsonCType, `{"prune":true,"prune":false}`, 400, `invalid sync request: duplicate field "prune"`},
		{"a wrong type is rejected", jsonCType, `{"prune":"yes"}`, 400, "failed to decode the sync request"},
		{"a body that is not JSON is rejected", jsonCType, `prune=true`, 400, "failed to decode the sync request"},
		{"trailing data is rejected", jsonCType, `{"prune":true} {}`, 400, "failed to decode the sync request"},
		{"no content type is read as JSON (kubectl create --raw sends none)", "", `{"prune":true,"bogus":1}`, 400, `unknown field "bogus"`},
		{"a form body is the wrong content type", "application/x-www-form-urlencoded", `{"prune":true}`, 415, `unsupported content type "application/x-www-form-urlencoded"`},
		{"a revision with blanks is rejected", jsonCType, `{"revision":"main --upload-pack=x"}`, 400, "contains blanks or control characters"},
		{"attack: a revision with blanks among revisions is rejected", jsonCType, `{"revisions":["main","main --upload-pack=x"]}`, 400, "contains blanks or control characters"},
		{"revisions for an Application with spec.source are refused, naming the fix", jsonCType, `{"revisions":["main"]}`, 422, "revisions is for an Application with spec.sources; this one has spec.source: send revision"},
		{"a health timeout that is not a Go duration is rejected", jsonCType, `{"healthTimeout":"5 minutes"}`, 400, `invalid sync request: healthTimeout: Invalid value: "5 minutes": not a Go duration`},
		{"a negative health timeout is rejected", jsonCType, `{"healthTimeout":"-1m"}`, 400, `healthTimeout: Invalid value: "-1m": must be positive`},
		{"an oversized body is refused", jsonCType, `{"revision":"` + strings.Repeat("a", maxSyncRequestBytes) + `"}`, 413, "request body is larger than the limit of 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.do(t, http.MethodPost, syncPath, aliceAPIToken, tc.contentType, tc.body)
			if resp.code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", resp.code, tc.wantCode, resp.body)
			}
			if st := resp.status(t); !strings.Contains(st.Message, tc.wantMessage) || st.Code != int32(tc.wantCode) {
				t.Errorf("status %+v, want code %d and a message containing %q", st, tc.wantCode, tc.wantMessage)
			}
		})
	}
	if f.ops.Running("guestbook", "guestbook") {
		t.Fatal("an invalid request started a sync")
	}
	// No body at all is a plain sync.
	resp := f.do(t, http.MethodPost, syncPath, aliceAPIToken, "", "")
	if resp.code != http.StatusAccepted {
		t.Fatalf("empty body: code %d, want 202: %s", resp.code, resp.body)
	}
}

func TestAPIMethodsAndPaths(t *testing.T) {
	f := newAPIFixture(t, nil)
	// As in kube-apiserver, authorization comes before routing: alice may
	// not update applications/sync or get widgets, so both are 403, not
	// 405 and 404.
	if resp := f.do(t, http.MethodPut, syncPath, aliceAPIToken, "", ""); resp.code != http.StatusForbidden ||
		!strings.Contains(resp.body, `cannot update resource \"applications/sync\"`) {
		t.Errorf("PUT sync: %d %s", resp.code, resp.body)
	}
	if resp := f.do(t, http.MethodGet, APIPrefix+"/namespaces/guestbook/widgets/x", aliceAPIToken, "", ""); resp.code != http.StatusForbidden {
		t.Errorf("unknown resource: %d %s", resp.code, resp.body)
	}
	if resp := f.do(t, http.MethodGet, appPath+"?watch=maybe", aliceAPIToken, "", ""); resp.code != http.StatusBadRequest {
		t.Errorf("watch=maybe: %d %s", resp.code, resp.body)
	}
}

func TestAPIWithoutPolicyIsUnavailable(t *testing.T) {
	f := newAPIFixture(t, func() *policy.Snapshot { return nil })
	// No policy: no tokens either, so use a client certificate.
	resp := f.do(t, http.MethodPost, syncPath, "", "", "", withClientCert(t, f.ca, "alice", nil))
	if resp.code != http.StatusServiceUnavailable {
		t.Errorf("code %d, want 503 before a policy is loaded: %s", resp.code, resp.body)
	}
}

// TestAPIWatchStreamsNDJSON runs the API behind a real HTTP server so the
// stream is read as a client reads it: line by line while the sync runs.
func TestAPIWatchStreamsNDJSON(t *testing.T) {
	f := newAPIFixture(t, nil)
	srv := httptest.NewServer(withRequestID(f.handler))
	defer srv.Close()

	post, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+syncPath, nil)
	post.Header.Set("Authorization", "Bearer "+aliceAPIToken)
	resp, err := srv.Client().Do(post)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("sync: %d", resp.StatusCode)
	}
	<-f.runner.started

	get, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+appPath+"?watch=true", nil)
	get.Header.Set("Authorization", "Bearer "+aliceAPIToken)
	resp, err = srv.Client().Do(get)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != APIStreamContentType {
		t.Fatalf("watch: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	released := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		// Release the sync only once the replay has arrived: the rest must
		// stream while the response is open.
		if len(lines) == 3 && !released {
			close(f.runner.release)
			released = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, l := range lines {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &raw); err != nil {
			t.Fatalf("line %d is not one JSON object: %q", i+1, l)
		}
		var ev v1alpha1.OperationEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "resource":
			if len(raw) != 2 || ev.Resource == nil {
				t.Errorf("line %d: a resource event has type and resource only: %s", i+1, l)
			}
			got = append(got, "resource "+ev.Resource.Kind+" "+ev.Resource.Namespace+"/"+ev.Resource.Name+" "+ev.Resource.Status)
		case "state":
			if len(raw) != 2 || ev.State == nil {
				t.Errorf("line %d: a state event has type and state only: %s", i+1, l)
			}
			got = append(got, "state "+ev.State.Phase)
		default:
			t.Errorf("line %d: unknown type %q", i+1, ev.Type)
		}
	}
	want := []string{"resource Deployment guestbook/web Synced", "resource Service guestbook/web Synced", "state Running", "state Succeeded"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}

	// A watch after the end replays the result and ends.
	get, _ = http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+appPath+"?watch=true", nil)
	get.Header.Set("Authorization", "Bearer "+aliceAPIToken)
	resp2, err := srv.Client().Do(get)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	replay := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if len(replay) != 3 || !strings.Contains(replay[2], `"type":"state"`) || !strings.Contains(replay[2], `"phase":"Succeeded"`) {
		t.Errorf("replay after the end, want two resources and the final state:\n%s", body)
	}
}

func TestAPIStreamsEndWhenTheServerDrains(t *testing.T) {
	f := newAPIFixture(t, nil)
	if resp := f.do(t, http.MethodPost, syncPath, aliceAPIToken, "", ""); resp.code != 202 {
		t.Fatal(resp.body)
	}
	<-f.runner.started
	done := make(chan apiResponse, 1)
	go func() { done <- f.do(t, http.MethodGet, appPath+"?watch=1", aliceAPIToken, "", "") }()
	time.Sleep(50 * time.Millisecond)
	f.handler.CloseStreams()
	select {
	case resp := <-done:
		if resp.code != 200 || !strings.Contains(resp.body, `"type":"state"`) {
			t.Errorf("stream: %d %s", resp.code, resp.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end when the server drained")
	}
}

func TestServerRoutesTheAPIOutsideTheReviewGuard(t *testing.T) {
	f := newAPIFixture(t, nil)
	m := NewMetrics()
	s := NewServer(ServerOptions{API: f.handler, Metrics: m, Log: discardLog(),
		ClientAuth: NewClientCertAuth(newSwitchableVerifier(f.ca.pool()).VerifyOptions, []string{"kube-apiserver"}, discardLog())})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+appPath, nil)
	req.Header.Set("Authorization", "Bearer "+aliceAPIToken)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET through the server: %d, want 200 (a token, no client certificate)", resp.StatusCode)
	}
	var out bytes.Buffer
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	out.WriteString(rec.Body.String())
	if !strings.Contains(out.String(), `deputy_http_requests_total{code="200",endpoint="api"} 1`) {
		t.Errorf("no api request metric:\n%s", out.String())
	}
}

// TestAPIWatchOutlivesTheServerWriteTimeout: deputy's server has a
// WriteTimeout (30s) for whole responses; a watch must survive a sync that
// takes longer. Here the timeout is 200ms and the sync 1s.
func TestAPIWatchOutlivesTheServerWriteTimeout(t *testing.T) {
	f := newAPIFixture(t, nil)
	srv := httptest.NewUnstartedServer(f.handler)
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	if resp := f.do(t, http.MethodPost, syncPath, aliceAPIToken, "", ""); resp.code != 202 {
		t.Fatal(resp.body)
	}
	<-f.runner.started
	go func() {
		time.Sleep(time.Second)
		close(f.runner.release)
	}()
	client, err := apiclient.New(apiclient.Options{Server: srv.URL, Token: aliceAPIToken})
	if err != nil {
		t.Fatal(err)
	}
	var resources int
	final, err := client.Watch(t.Context(), "guestbook", "guestbook", func(ev v1alpha1.OperationEvent) error {
		if ev.Type == v1alpha1.OperationEventResource {
			resources++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("watch across the write timeout: %v", err)
	}
	if final.Phase != v1alpha1.OperationSucceeded || resources != 2 {
		t.Errorf("final %s with %d resources, want Succeeded with 2", final.Phase, resources)
	}
}

func TestRevisionsMismatch(t *testing.T) {
	multi := &v1alpha1.Application{Spec: v1alpha1.ApplicationSpec{Sources: []v1alpha1.ApplicationSource{{RepoURL: "a", Path: "."}, {RepoURL: "b", Ref: "values"}}}}
	single := &v1alpha1.Application{Spec: v1alpha1.ApplicationSpec{Source: v1alpha1.ApplicationSource{RepoURL: "a"}}}
	for _, tc := range []struct {
		name string
		app  *v1alpha1.Application
		op   v1alpha1.SyncOperation
		want string
	}{
		{"no revision fits any Application", multi, v1alpha1.SyncOperation{}, ""},
		{"one revision per source fits spec.sources", multi, v1alpha1.SyncOperation{Revisions: []string{"", "v2"}}, ""},
		{"revision fits spec.source", single, v1alpha1.SyncOperation{Revision: "v2"}, ""},
		{"revision on spec.sources names the fix", multi, v1alpha1.SyncOperation{Revision: "v2"}, "revision names one revision, but the Application has 2 sources (spec.sources): send revisions"},
		{"revisions not one per source", multi, v1alpha1.SyncOperation{Revisions: []string{"v2"}}, "revisions has 1 revisions, but the Application has 2 sources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := revisionsMismatch(tc.app, tc.op); !strings.Contains(got, tc.want) || (tc.want == "") != (got == "") {
				t.Errorf("revisionsMismatch = %q, want %q", got, tc.want)
			}
		})
	}
}

// invalidRetry serves guestbook/guestbook with an invalid
// spec.syncPolicy.retry (as a cluster may hold it: no admission checks it).
type invalidRetry struct{ apps.Applications }

func (i invalidRetry) Application(ns, name string) (*v1alpha1.Application, error) {
	a, err := i.Applications.Application(ns, name)
	if a != nil {
		a = a.DeepCopy()
		a.Spec.SyncPolicy = &v1alpha1.SyncPolicy{Retry: &v1alpha1.RetryStrategy{Limit: 2, Backoff: &v1alpha1.Backoff{Duration: "later"}}}
	}
	return a, err
}

func TestAPISyncOfAnInvalidRetryIs422NamingTheField(t *testing.T) {
	f := newAPIFixture(t, nil, func(_ *APIAuthenticationOptions, o *APIOptions) { o.Applications = invalidRetry{o.Applications} })
	resp := f.do(t, http.MethodPost, syncPath, aliceAPIToken, jsonCType, `{"healthTimeout":"90s"}`)
	if resp.code != http.StatusUnprocessableEntity {
		t.Fatalf("code %d, want 422: %s", resp.code, resp.body)
	}
	if st := resp.status(t); !strings.Contains(st.Message, `spec.syncPolicy.retry.backoff.duration: Invalid value: "later"`) {
		t.Errorf("message %q does not name the field", st.Message)
	}
	if f.ops.Running("guestbook", "guestbook") {
		t.Error("an invalid sync started")
	}
}

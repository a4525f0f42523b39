package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/webhook/decisionlog"
)

// lockedBuffer is a bytes.Buffer for the decision log's writer goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDecisionLogThroughTheRouter sends SubjectAccessReviews through
// deputy's handler chain with logging.decisions denied: the denied one is
// logged with the request ID the chain assigned, the allowed one is not,
// and neither the bearer token of the request nor the values of the
// subject's extra appear.
func TestDecisionLogThroughTheRouter(t *testing.T) {
	const (
		bearer       = "s3cr3t-bearer-token-value"
		credentialID = "JTI=secret-credential-id"
	)
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetVerb() == "get" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "nope", nil
	})
	var out lockedBuffer
	m := NewMetrics()
	written, dropped := m.DecisionLogCounters()
	dl := decisionlog.New(decisionlog.Options{Mode: decisionlog.Denied, Output: &out, Written: written, Dropped: dropped})
	h := NewServer(ServerOptions{
		Authorize: &AuthorizeHandler{Authorizer: authz, Metrics: m, Log: discardLog(), DecisionLog: dl,
			PolicyGeneration: func() string { return "gen-1" }},
		Metrics: m, Log: discardLog(),
	}).Handler()

	var ids []string
	for _, verb := range []string{"get", "delete"} {
		body := strings.NewReplacer(`"verb": "get"`, `"verb": "`+verb+`"`,
			`"extra": {"scopes.example.com": ["read", "write"]}`, `"extra": {"authentication.kubernetes.io/credential-id": ["`+credentialID+`"]}`).Replace(sarV1Body)
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/authorize", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+bearer)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: status %d: %s", verb, rec.Code, rec.Body)
		}
		ids = append(ids, rec.Header().Get("X-Request-Id"))
	}
	if err := dl.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, secret := range []string{bearer, credentialID} {
		if strings.Contains(got, secret) {
			t.Errorf("the decision log holds %q:\n%s", secret, got)
		}
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1 (the denial):\n%s", len(lines), got)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"msg": "decision", "requestID": ids[1], "user": "alice", "verb": "delete", "apiGroup": "apps",
		"resource": "deployments", "subresource": "scale", "namespace": "team-a", "name": "web", "decision": "deny", "reason": "nope",
		"authorizer": "", "impersonation": "none", "policyGeneration": "gen-1"} {
		if line[k] != want {
			t.Errorf("%s = %v, want %v", k, line[k], want)
		}
	}
	if extra, _ := json.Marshal(line["extra"]); string(extra) != `["authentication.kubernetes.io/credential-id"]` {
		t.Errorf("extra = %s, want the key only", extra)
	}
	if n := counterValue(t, m, "deputy_decision_logs_written_total", nil); n != 1 {
		t.Errorf("deputy_decision_logs_written_total = %v, want 1", n)
	}
}

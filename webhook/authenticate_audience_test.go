package webhook

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/tokenreview"
)

// A token kube-apiserver presents for its own API audiences, which deputy's
// static tokens are not valid for, is unauthenticated (as upstream) and the
// log says what to configure, without the token.
func TestAuthenticateExplainsAnAudienceMismatchInTheLog(t *testing.T) {
	entries, err := policy.ParseTokenFile("tokens.csv", strings.NewReader("secret-token-42,alice,uid,\"g\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.NewTokenSet(entries)
	if err != nil {
		t.Fatal(err)
	}
	auds := []string{"https://kubernetes.default.svc.cluster.local"}
	var logs bytes.Buffer
	h := &AuthenticateHandler{
		Reviewer:     tokenreview.NewReviewer(tokenreview.NewChain(auds, func() *policy.TokenSet { return set }), auds),
		Metrics:      NewMetrics(),
		Log:          slog.New(slog.NewTextHandler(&logs, nil)),
		APIAudiences: auds,
		KnownToken: func(tok string) (string, bool) {
			u, ok := set.Lookup(tok)
			if !ok {
				return "", false
			}
			return u.GetName(), true
		},
	}
	for _, tc := range []struct {
		name, body string
		wantWarn   bool
	}{
		{"a known token for another audience is explained", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"secret-token-42","audiences":["https://127.0.0.1:6443"]}}`, true},
		{"an unknown token is not", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"nope","audiences":["https://127.0.0.1:6443"]}}`, false},
		{"a known token for deputy's audience authenticates", `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"secret-token-42","audiences":["https://kubernetes.default.svc.cluster.local"]}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs.Reset()
			r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/authenticate", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			got := strings.Contains(logs.String(), "--api-audiences")
			if got != tc.wantWarn {
				t.Errorf("warning logged = %v, want %v; log:\n%s", got, tc.wantWarn, logs.String())
			}
			if tc.wantWarn && (!strings.Contains(logs.String(), "user=alice") || !strings.Contains(logs.String(), "https://127.0.0.1:6443")) {
				t.Errorf("warning lacks the user or the requested audience:\n%s", logs.String())
			}
			if strings.Contains(logs.String(), "secret-token-42") {
				t.Error("the log contains the token")
			}
		})
	}
}

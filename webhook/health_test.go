package webhook

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

func get(t *testing.T, h http.Handler, target string) (int, http.Header, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, target, nil))
	return rec.Code, rec.Header(), rec.Body.String()
}

func TestReadyz(t *testing.T) {
	policyErr := errors.New(`policy/rbac.yaml document 2: ClusterRole "edit": rules[0].verbs: Required value`)
	tests := []struct {
		name         string
		target       string
		policy       error
		shuttingDown bool
		wantCode     int
		wantBody     string
	}{
		{
			name: "every check passing is 200 ok", target: "/readyz",
			wantCode: 200, wantBody: "ok\n",
		},
		{
			name: "every check passing with ?verbose lists the checks", target: "/readyz?verbose",
			wantCode: 200, wantBody: "[+]shutdown ok\n[+]policy ok\nreadyz check passed\n",
		},
		{
			name: "verbose=1 lists the checks too", target: "/readyz?verbose=1",
			wantCode: 200, wantBody: "[+]shutdown ok\n[+]policy ok\nreadyz check passed\n",
		},
		{
			name: "a failing check is 503 with its reason", target: "/readyz", policy: policyErr,
			wantCode: 503,
			wantBody: "[+]shutdown ok\n[-]policy failed: " + policyErr.Error() + "\nreadyz check failed\n",
		},
		{
			name: "a failing check with ?verbose is the same 503", target: "/readyz?verbose", policy: policyErr,
			wantCode: 503,
			wantBody: "[+]shutdown ok\n[-]policy failed: " + policyErr.Error() + "\nreadyz check failed\n",
		},
		{
			name: "a multi-line reason stays inside its check", target: "/readyz",
			policy:   errors.New("2 errors:\na.yaml: bad\nb.yaml: worse"),
			wantCode: 503,
			wantBody: "[+]shutdown ok\n[-]policy failed: 2 errors:\n    a.yaml: bad\n    b.yaml: worse\nreadyz check failed\n",
		},
		{
			name: "a server that is shutting down is not ready", target: "/readyz", shuttingDown: true,
			wantCode: 503,
			wantBody: "[-]shutdown failed: deputy is shutting down\n[+]policy ok\nreadyz check failed\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewServer(ServerOptions{
				Readiness: []ReadinessCheck{{Name: "policy", Check: func() error { return tc.policy }}},
				Metrics:   NewMetrics(), Log: discardLog(),
			})
			s.shuttingDown.Store(tc.shuttingDown)
			code, header, body := get(t, s.Handler(), tc.target)
			if code != tc.wantCode {
				t.Errorf("status code = %d, want %d", code, tc.wantCode)
			}
			if body != tc.wantBody {
				t.Errorf("body = %q, want %q", body, tc.wantBody)
			}
			if ct := header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type = %q, want text/plain; charset=utf-8", ct)
			}
			for _, live := range []string{"/healthz", "/livez"} {
				if code, _, body := get(t, s.Handler(), live); code != 200 || body != "ok\n" {
					t.Errorf("GET %s = %d %q, want 200 \"ok\\n\" whatever readiness says", live, code, body)
				}
			}
		})
	}
}

func TestReadyzEvaluatesChecksOnEveryRequest(t *testing.T) {
	var broken atomic.Bool
	h := NewServer(ServerOptions{
		Readiness: []ReadinessCheck{{Name: "policy", Check: func() error {
			if broken.Load() {
				return errors.New("broken")
			}
			return nil
		}}},
		Metrics: NewMetrics(), Log: discardLog(),
	}).Handler()
	for i, wantCode := range []int{200, 503, 200} {
		broken.Store(wantCode != 200)
		if code, _, body := get(t, h, "/readyz"); code != wantCode {
			t.Errorf("request %d: GET /readyz = %d %q, want %d", i+1, code, body, wantCode)
		}
	}
}

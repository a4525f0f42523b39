package webhook

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"deputy.dev/deputy/policy"
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

// The readiness check Run installs for a policy source, over real files: red
// with the file's error before the first good load, green after, red with
// both times and the error while a reload fails (the last good policy serves).
func TestReadyzFollowsThePolicySource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rbac.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const good = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: reader\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get]\n"
	const broken = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: [\n"
	src := policy.NewFileSource([]string{dir}, policy.FileSourceOptions{})
	h := NewServer(ServerOptions{
		Readiness: []ReadinessCheck{{Name: "policy", Check: policyReady(src)}},
		Metrics:   NewMetrics(), Log: discardLog(),
	}).Handler()

	t.Run("a source that never loaded is not ready", func(t *testing.T) {
		code, _, body := get(t, h, "/readyz")
		if code != 503 || !strings.Contains(body, "[-]policy failed: no policy loaded yet\n") {
			t.Errorf("GET /readyz = %d %q, want 503 naming the missing policy", code, body)
		}
	})
	t.Run("a first load that fails is not ready and names the file", func(t *testing.T) {
		write(broken)
		if err := src.Load(); err == nil {
			t.Fatal("Load of a broken file succeeded")
		}
		code, _, body := get(t, h, "/readyz")
		if code != 503 || !strings.Contains(body, "[-]policy failed: no policy loaded: ") || !strings.Contains(body, "rbac.yaml") {
			t.Errorf("GET /readyz = %d %q, want 503 naming rbac.yaml", code, body)
		}
	})
	t.Run("a good load is ready", func(t *testing.T) {
		write(good)
		if err := src.Load(); err != nil {
			t.Fatal(err)
		}
		if code, _, body := get(t, h, "/readyz"); code != 200 || body != "ok\n" {
			t.Errorf("GET /readyz = %d %q, want 200 ok", code, body)
		}
	})
	t.Run("a failed reload is not ready and says the last good policy serves", func(t *testing.T) {
		write(broken)
		if err := src.Load(); err == nil {
			t.Fatal("Load of a broken file succeeded")
		}
		code, _, body := get(t, h, "/readyz")
		re := regexp.MustCompile(`\[-\]policy failed: last reload failed at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, serving the policy loaded at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: .*rbac\.yaml`)
		if code != 503 || !re.MatchString(body) {
			t.Errorf("GET /readyz = %d %q, want 503 matching %s", code, body, re)
		}
	})
}

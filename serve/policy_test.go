package serve

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/webhook"
)

func get(t *testing.T, h http.Handler, target string) (int, http.Header, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, target, nil))
	return rec.Code, rec.Header(), rec.Body.String()
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
	h := webhook.NewServer(webhook.ServerOptions{
		Readiness: []webhook.ReadinessCheck{{Name: "policy", Check: policyReady(src)}},
		Metrics:   webhook.NewMetrics(), Log: discardLog(),
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

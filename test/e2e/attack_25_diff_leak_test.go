package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/test/framework"
)

// Issue 16, diff as an information leak (attack 25), on a cluster-mode
// replica (setupWaves' environment): a user of deputy's policy allowed get
// on applications/diff only in another namespace reads nothing of the
// Application's diff; no Secret value (live or Git: data, stringData, the
// last-applied annotation, a Secret inside a List, a Secret the dry run
// refuses) shows in `deputy diff` or its `-o json`; an object tracked by
// another Application shows no content.

// attack25TenantB is a user of the replica's policy who may diff and sync
// Applications only in namespace attack25TenantBNS.
const (
	attack25TenantB      = "attack25-tenant-b"
	attack25TenantBToken = "e2e-attack25-tenant-b-token-81c3aa"
	attack25TenantBNS    = "attack25-b-apps"
)

// writeTwoTenantPolicy writes the replicas' policy: the waves operator
// (wavesOperatorToken) in wavesAppNS, and user in namespace ns with token.
func writeTwoTenantPolicy(t *testing.T, env *wavesEnv, user, token, ns string) {
	t.Helper()
	roleFor := func(who, where string) string {
		return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: application-syncer, namespace: %[2]s}
rules:
- apiGroups: [deputy.dev]
  resources: [applications, applications/sync, applications/diff]
  verbs: [get, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: %[1]s-syncs, namespace: %[2]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: application-syncer}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %[1]s}
`, who, where)
	}
	files := map[string]string{
		"tokens.csv": wavesOperatorToken + ",waves-operator,waves-operator-uid,\"e2e\"\n" +
			token + "," + user + "," + user + "-uid,\"e2e\"\n",
		"rbac.yaml": roleFor("waves-operator", wavesAppNS) + "---\n" + roleFor(user, ns),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(env.policyDir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// apiHTTPClient is an HTTPS client trusting the replicas' CA.
func apiHTTPClient(t *testing.T) *http.Client {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(deputy.CertDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// apiGet GETs path on replica with token, returning the status and body.
func apiGet(t *testing.T, replica *framework.Deputy, token, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, replica.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := apiHTTPClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// diffPath is the API path of an Application's diff.
func diffPath(ns, name string) string {
	return v1alpha1.APIPath + "/namespaces/" + ns + "/applications/" + name + "/diff"
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestAttack25DiffLeaksNothing(t *testing.T) {
	env := setupWaves(t)
	grantSecrets(t)
	ensureNamespace(t, attack25TenantBNS)
	writeTwoTenantPolicy(t, env, attack25TenantB, attack25TenantBToken, attack25TenantBNS)
	replica := env.start(t)

	// Live objects someone else made: Secrets applied client-side (their
	// last-applied annotation repeats the values), and a ConfigMap another
	// Application tracks.
	const liveSecret, liveListed, otherContent = "LIVE-a25-password-5521", "LIVE-a25-listed-9034", "OTHER-APP-a25-content-7781"
	live := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: a25-creds, namespace: %[1]s}
data: {password: %[2]s, untouched: %[3]s}
stringData: {token: %[4]s-token}
---
apiVersion: v1
kind: Secret
metadata: {name: a25-listed, namespace: %[1]s}
data: {password: %[5]s}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: a25-other-tracked
  namespace: %[1]s
  annotations: {%[6]s: %[7]s/someone-else}
data: {content: %[8]s}
`, wavesDestNS, b64(liveSecret), b64(liveSecret+"-untouched"), liveSecret, b64(liveListed), syncer.TrackingAnnotation, wavesAppNS, otherContent)
	if out, stderr, err := cp.Kubectl(t.Context(), []byte(live), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s%s", err, out, stderr)
	}
	t.Cleanup(func() {
		_, _, _ = cp.Kubectl(t.Context(), []byte(live), "delete", "--ignore-not-found", "-f", "-")
	})

	// The tenant's Git: the same Secrets with other values (stringData too,
	// and one inside a List), a Secret the apiserver refuses (its value is
	// not the JSON its type requires) and the other Application's ConfigMap.
	const gitSecret, gitListed, gitRefused = "GIT-a25-password-6610", "GIT-a25-listed-1177", "GIT-a25-refused-4480"
	repo := newGitRepo(t)
	repo.write("a25/creds.yaml", fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: a25-creds
  annotations: {kubectl.kubernetes.io/last-applied-configuration: '{"data":{"password":"%[1]s"}}'}
data: {password: %[2]s, untouched: %[3]s}
stringData: {token: %[1]s-token, extra: %[1]s-extra}
`, gitSecret, b64(gitSecret), b64(liveSecret+"-untouched")))
	repo.write("a25/list.yaml", fmt.Sprintf(`apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  metadata: {name: a25-listed}
  data: {password: %s}
`, b64(gitListed)))
	repo.write("a25/refused.yaml", fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: a25-refused}
type: kubernetes.io/dockerconfigjson
data: {.dockerconfigjson: %s}
`, b64(gitRefused+" is not JSON")))
	repo.write("a25/other.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a25-other-tracked}\ndata: {content: mine}\n")
	repo.commit("a25")
	createWavesApplication(t, wavesApplication("a25", repo.dir, "a25"))

	leaks := []string{liveSecret, liveListed, gitSecret, gitListed, gitRefused, otherContent}
	for _, s := range []string{liveSecret, liveListed, gitSecret, gitListed, gitRefused + " is not JSON", liveSecret + "-untouched", liveSecret + "-token"} {
		leaks = append(leaks, b64(s))
	}
	wantNoLeak := func(t *testing.T, what, out string) {
		t.Helper()
		for _, l := range leaks {
			if strings.Contains(out, l) {
				t.Errorf("%s shows %q:\n%s", what, l, out)
			}
		}
	}

	t.Run("the owner's deputy diff (text and -o json) shows no Secret value and not the other Application's object", func(t *testing.T) {
		out, code := deputyDiff(t, replica, "a25")
		t.Logf("deputy diff (exit %d):\n%s", code, out)
		if code == 2 && !strings.Contains(out, "a25-creds") {
			t.Fatalf("deputy diff failed: %s", out)
		}
		wantNoLeak(t, "deputy diff", out)
		for _, want := range []string{"a25-creds", "password: ++++", "a25-other-tracked"} {
			if !strings.Contains(out, want) {
				t.Errorf("the output lacks %q", want)
			}
		}
		js, _ := deputyDiff(t, replica, "a25", "-o", "json")
		wantNoLeak(t, "deputy diff -o json", js)
		status, body := apiGet(t, replica, wavesOperatorToken, diffPath(wavesAppNS, "a25"))
		if status != http.StatusOK {
			t.Errorf("GET diff as the operator: %d %s", status, body)
		}
		wantNoLeak(t, "the API's answer", body)
	})

	t.Run("a user allowed to diff only in another namespace is refused and reads nothing", func(t *testing.T) {
		status, body := apiGet(t, replica, attack25TenantBToken, diffPath(wavesAppNS, "a25"))
		t.Logf("tenant B: %d %s", status, body)
		if status != http.StatusForbidden {
			t.Errorf("tenant B's diff of %s/a25: %d, want 403", wavesAppNS, status)
		}
		wantNoLeak(t, "tenant B's answer", body)
		if strings.Contains(body, "a25-creds") || strings.Contains(body, "\"resources\"") {
			t.Errorf("tenant B's answer carries the diff: %s", body)
		}
		// Its own namespace: no such Application (404, nothing else).
		if status, body := apiGet(t, replica, attack25TenantBToken, diffPath(attack25TenantBNS, "a25")); status != http.StatusNotFound {
			t.Errorf("tenant B's diff in its own namespace: %d %s, want 404", status, body)
		}
		if status, _ := apiGet(t, replica, "not-a-token", diffPath(wavesAppNS, "a25")); status != http.StatusUnauthorized {
			t.Errorf("an unknown token: %d, want 401", status)
		}
	})
}

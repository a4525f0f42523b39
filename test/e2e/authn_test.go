package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/test/framework"
)

// Issue #7, token authentication, against the real kube-apiserver and a
// deputy in cluster mode configured with an OIDC issuer (a local HTTPS server
// with JWKS) and project tokens:
//   - an OIDC token authenticates through kube-apiserver's token webhook;
//     another audience is 401;
//   - a ServiceAccount token (TokenRequest) authenticates at deputy's sync
//     endpoint through the delegated TokenReview, never at /authenticate;
//   - a project token of project A is 403 on project B's Application (both
//     in the namespace the e2e deputy reconciles, so only the token's project
//     scope tells them apart), and 401 once expired, revoked or its role
//     deleted.

const (
	authnOIDCAudience = "deputy-e2e"
	authnGroup        = "authn-deployers"
	// Projects A and B and their Applications, in the namespace the e2e
	// deputy reconciles (authnNamespace): one namespace, so only the project
	// scope of the token tells them apart.
	authnProjectA = "authn-alpha"
	authnProjectB = "authn-beta"
	authnAppA     = "authn-web-a"
	authnAppA2    = "authn-api"
	authnAppB     = "authn-web-b"
)

// authnPolicy lets the group of the projects' roles and the ServiceAccount
// ns/ci-bot read and sync every Application, through deputy's own policy (a
// file in the watched policy directory).
func authnPolicy(ns string) string {
	return `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: authn-e2e-app-syncer}
rules:
- apiGroups: [deputy.dev]
  resources: [applications, applications/sync]
  verbs: [get, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: authn-e2e-app-syncer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: authn-e2e-app-syncer}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: ` + authnGroup + `}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "deputy:project:` + ns + `/` + authnProjectA + `"}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "deputy:project:` + ns + `/` + authnProjectB + `"}
- {kind: ServiceAccount, name: ci-bot, namespace: ` + ns + `}
`
}

type authnEnv struct {
	ns                      string // where the projects, Applications and ServiceAccounts are
	cfgFile, revocationFile string
	issuer                  *framework.OIDCIssuer
	client                  *http.Client
}

// setupAuthn starts the OIDC issuer, creates the project token key, the
// projects and Applications, and restarts deputy with an authentication
// section; deputy gets its usual configuration back when the test ends.
func setupAuthn(t *testing.T) *authnEnv {
	t.Helper()
	dir := t.TempDir()
	env := &authnEnv{}
	var err error
	if env.issuer, err = framework.StartOIDCIssuer(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.issuer.Close)
	caFile, err := env.issuer.WriteCA(dir, "oidc-ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	keyFile, pubFile := filepath.Join(dir, "project-token.key"), filepath.Join(dir, "project-token.pub")
	if _, err := framework.CLI(deputy.Bin, "token", "keygen", "--private-key", keyFile, "--public-key", pubFile); err != nil {
		t.Fatal(err)
	}
	env.revocationFile = filepath.Join(dir, "revoked.txt")
	if err := os.WriteFile(env.revocationFile, []byte("# revoked project tokens\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The e2e deputy's configuration plus an authentication section.
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(deputyConfig(true)), &cfg); err != nil {
		t.Fatal(err)
	}
	env.ns = "e2e-authn"
	if s, ok := cfg["sync"].(map[string]any); ok {
		if nss, ok := s["applicationNamespaces"].([]any); ok && len(nss) > 0 {
			env.ns = nss[0].(string)
		}
	}
	cfg["authentication"] = map[string]any{
		"jwt": []any{map[string]any{
			"issuer":                   map[string]any{"url": env.issuer.URL(), "audiences": []any{authnOIDCAudience}},
			"certificateAuthorityFile": caFile,
			"claimMappings": map[string]any{
				"username": map[string]any{"claim": "sub", "prefix": "oidc:"},
				"groups":   map[string]any{"claim": "groups", "prefix": "oidc:"},
			},
		}},
		"projectTokens": map[string]any{"signingKeyFile": keyFile, "revocationFile": env.revocationFile},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	env.cfgFile = filepath.Join(dir, "deputy-authn.yaml")
	if err := os.WriteFile(env.cfgFile, data, 0o600); err != nil {
		t.Fatal(err)
	}

	policyFile := filepath.Join(extraPolicy, "authn-e2e.yaml")
	if err := os.WriteFile(policyFile, []byte(authnPolicy(env.ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(policyFile) })

	ensureNamespace(t, env.ns)
	authnProject(t, env.ns, authnProjectA, "deployer", "temp")
	authnProject(t, env.ns, authnProjectB, "deployer")
	authnApplication(t, env.ns, authnAppA, authnProjectA)
	authnApplication(t, env.ns, authnAppA2, authnProjectA)
	authnApplication(t, env.ns, authnAppB, authnProjectB)

	d, err := deputy.Restart(clusterModeArgs(env.cfgFile)...)
	if err != nil {
		t.Fatal(err)
	}
	deputy = d
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of deputy with the authentication configuration:\n%s", deputy.Logs())
		}
		restoreDeputy(t)
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := deputy.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, deputy.Logs())
	}
	if env.client, err = deputy.Client(false); err != nil {
		t.Fatal(err)
	}
	return env
}

// authnProject creates the deputy.dev AppProject ns/name whose roles all
// name the group authnGroup (OIDC users granted the role, as in Argo CD;
// project tokens never carry it).
func authnProject(t *testing.T, ns, name string, roles ...string) {
	t.Helper()
	var rs []any
	for _, r := range roles {
		rs = append(rs, map[string]any{"name": r, "groups": []any{authnGroup}})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "deputy.dev/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"sourceRepos":  []any{"*"},
			"destinations": []any{map[string]any{"server": inCluster, "namespace": ns}},
			"roles":        rs,
		},
	}}
	res := dynamic.NewForConfigOrDie(cp.Admin).Resource(authnAppProjects).Namespace(ns)
	if _, err := res.Create(t.Context(), u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create AppProject %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

var authnAppProjects = apps.ApplicationsResource.GroupVersion().WithResource("appprojects")

// authnApplication creates the Application ns/name of project (its
// repository does not exist: the tests only start dry-run syncs and do not
// wait for them).
func authnApplication(t *testing.T, ns, name, project string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "deputy.dev/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"project":     project,
			"source":      map[string]any{"repoURL": filepath.Join(t.TempDir(), "no-such-repo"), "path": "."},
			"destination": map[string]any{"server": inCluster, "namespace": ns},
		},
	}}
	res := dynamic.NewForConfigOrDie(cp.Admin).Resource(apps.ApplicationsResource).Namespace(ns)
	if _, err := res.Create(t.Context(), u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create Application %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// restoreDeputy restarts deputy with the e2e configuration (as
// restartDeputy(t, true) does, but usable in a cleanup, where t.Context()
// has ended).
func restoreDeputy(t *testing.T) {
	cfgFile := filepath.Join(work, "deputy.yaml")
	if err := os.WriteFile(cfgFile, []byte(deputyConfig(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := deputy.Restart(clusterModeArgs(cfgFile)...)
	if err != nil {
		t.Fatal(err)
	}
	deputy = d
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := deputy.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, deputy.Logs())
	}
}

// api calls deputy's API: GET the Application, or POST a dry-run sync.
func (e *authnEnv) api(t *testing.T, method, ns, name, token string) (int, string) {
	t.Helper()
	url := deputy.URL + "/apis/deputy.dev/v1alpha1/namespaces/" + ns + "/applications/" + name
	var body io.Reader
	if method == http.MethodPost {
		url += "/sync"
		body = strings.NewReader(`{"dryRun":true}`)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// expect returns a check for eventually: the call answers want (and its
// body contains substr).
func (e *authnEnv) expect(t *testing.T, method, ns, name, token string, want int, substr string) func() error {
	return func() error {
		code, body := e.api(t, method, ns, name, token)
		if code != want || !strings.Contains(body, substr) {
			return fmt.Errorf("%s %s/%s: %d %s, want %d with %q", method, ns, name, code, body, want, substr)
		}
		return nil
	}
}

// projectToken runs `deputy token create` with deputy's configuration.
func (e *authnEnv) projectToken(t *testing.T, project, role string, ttl time.Duration) (token, id string) {
	t.Helper()
	out, err := deputyStdout(deputy.Bin, "token", "create", "--config", e.cfgFile, "--project", project, "--role", role, "--ttl", ttl.String(), "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Token, ID string }
	if err := json.Unmarshal(out, &got); err != nil || got.Token == "" || got.ID == "" {
		t.Fatalf("deputy token create -o json: %v\n%s", err, out)
	}
	return got.Token, got.ID
}

// deputyStdout runs the deputy binary and returns its stdout (stderr goes
// into the error).
func deputyStdout(bin string, args ...string) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd := osexec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %v: %w\n%s", bin, args, err, errb.String())
	}
	return out.Bytes(), nil
}

func whoami(t *testing.T, token string) (authenticationv1.UserInfo, error) {
	t.Helper()
	review, err := kubernetes.NewForConfigOrDie(cp.TokenConfig(token)).AuthenticationV1().SelfSubjectReviews().
		Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return review.Status.UserInfo, nil
}

func TestAuthentication(t *testing.T) {
	env := setupAuthn(t)
	var tokens []string // every credential used, none may appear in deputy's log
	defer func() {
		logs := deputy.Logs()
		for _, tok := range tokens {
			if strings.Contains(logs, tok) {
				t.Error("deputy logged a token")
			}
		}
	}()

	t.Run("an OIDC token authenticates through kube-apiserver's token webhook", func(t *testing.T) {
		tok, err := env.issuer.IDToken(authnOIDCAudience, "erin", []string{"e2e-devs"}, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		var u authenticationv1.UserInfo
		eventually(t, "erin is authenticated", func() (err error) { u, err = whoami(t, tok); return err })
		if u.Username != "oidc:erin" || !slices.Contains(u.Groups, "oidc:e2e-devs") || !slices.Contains(u.Groups, "system:authenticated") {
			t.Errorf("kube-apiserver sees %+v, want oidc:erin in oidc:e2e-devs", u)
		}
	})
	t.Run("an OIDC token for another audience is 401 at kube-apiserver", func(t *testing.T) {
		tok, err := env.issuer.IDToken("another-client", "erin", nil, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		if _, err := whoami(t, tok); !apierrors.IsUnauthorized(err) {
			t.Errorf("err = %v, want 401 Unauthorized", err)
		}
	})
	t.Run("an expired OIDC token is 401 at kube-apiserver", func(t *testing.T) {
		tok, err := env.issuer.IDToken(authnOIDCAudience, "erin", nil, time.Now().Add(-2*time.Hour), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		if _, err := whoami(t, tok); !apierrors.IsUnauthorized(err) {
			t.Errorf("err = %v, want 401 Unauthorized", err)
		}
	})

	t.Run("a ServiceAccount token authenticates at deputy's sync endpoint", func(t *testing.T) {
		tok := serviceAccountToken(t, env.ns, "ci-bot")
		tokens = append(tokens, tok)
		eventually(t, "ci-bot reads its Application", env.expect(t, http.MethodGet, env.ns, authnAppA2, tok, http.StatusOK, `"name":"`+authnAppA2+`"`))
		if code, body := env.api(t, http.MethodPost, env.ns, authnAppA2, tok); code != http.StatusAccepted {
			t.Errorf("ci-bot's sync of %s: %d %s, want 202", authnAppA2, code, body)
		}
	})
	t.Run("a ServiceAccount without a grant is authenticated, then forbidden", func(t *testing.T) {
		tok := serviceAccountToken(t, env.ns, "nobody")
		tokens = append(tokens, tok)
		code, body := env.api(t, http.MethodPost, env.ns, authnAppA2, tok)
		if code != http.StatusForbidden || !strings.Contains(body, `system:serviceaccount:`+env.ns+`:nobody\" cannot create resource \"applications/sync\"`) {
			t.Errorf("%d %s, want 403 naming the ServiceAccount", code, body)
		}
	})
	t.Run("deputy's /authenticate never delegates a ServiceAccount token to the cluster", func(t *testing.T) {
		tok := serviceAccountToken(t, env.ns, "ci-bot")
		tokens = append(tokens, tok)
		c, err := deputy.Client(true)
		if err != nil {
			t.Fatal(err)
		}
		review := fmt.Sprintf(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":%q}}`, tok)
		resp, err := c.Post(deputy.URL+"/authenticate", "application/json", strings.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got authenticationv1.TokenReview
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || got.Status.Authenticated || got.Status.Error != "" {
			t.Errorf("/authenticate answered %d %+v, want unauthenticated without error", resp.StatusCode, got.Status)
		}
	})

	t.Run("project tokens", func(t *testing.T) {
		alpha, _ := env.projectToken(t, env.ns+"/"+authnProjectA, "deployer", time.Hour)
		tokens = append(tokens, alpha)
		t.Run("kube-apiserver sees the project role through deputy's webhook", func(t *testing.T) {
			var u authenticationv1.UserInfo
			eventually(t, "the project token is authenticated", func() (err error) { u, err = whoami(t, alpha); return err })
			// The token carries its project's group only, never the role's
			// groups (authnGroup): those name the OIDC users granted the role.
			if u.Username != "deputy:project:"+env.ns+"/"+authnProjectA+":deployer" ||
				!slices.Contains(u.Groups, "deputy:project:"+env.ns+"/"+authnProjectA) || slices.Contains(u.Groups, authnGroup) ||
				!slices.Equal(u.Extra["deputy.dev/project"], []string{env.ns + "/" + authnProjectA}) {
				t.Errorf("kube-apiserver sees %+v", u)
			}
		})
		t.Run("project A's token syncs project A's Application", func(t *testing.T) {
			eventually(t, "A's token reads A's Application", env.expect(t, http.MethodGet, env.ns, authnAppA, alpha, http.StatusOK, `"name":"`+authnAppA+`"`))
			if code, body := env.api(t, http.MethodPost, env.ns, authnAppA, alpha); code != http.StatusAccepted {
				t.Errorf("sync of %s: %d %s, want 202", authnAppA, code, body)
			}
		})
		t.Run("project A's token is 403 on project B's Application", func(t *testing.T) {
			want := fmt.Sprintf(`may only act on Applications of that project; Application \"%s/%s\" belongs to AppProject \"%s/%s\"`, env.ns, authnAppB, env.ns, authnProjectB)
			for _, method := range []string{http.MethodPost, http.MethodGet} {
				code, body := env.api(t, method, env.ns, authnAppB, alpha)
				if code != http.StatusForbidden || !strings.Contains(body, want) {
					t.Errorf("%s: %d %s, want 403 naming both projects", method, code, body)
				}
			}
		})
		t.Run("an expired project token is 401", func(t *testing.T) {
			short, _ := env.projectToken(t, env.ns+"/"+authnProjectA, "deployer", 2*time.Second)
			tokens = append(tokens, short)
			time.Sleep(3 * time.Second)
			if code, body := env.api(t, http.MethodGet, env.ns, authnAppA, short); code != http.StatusUnauthorized {
				t.Errorf("%d %s, want 401", code, body)
			}
		})
		t.Run("a revoked project token is 401", func(t *testing.T) {
			tok, id := env.projectToken(t, env.ns+"/"+authnProjectA, "deployer", time.Hour)
			tokens = append(tokens, tok)
			eventually(t, "the token works before its revocation", env.expect(t, http.MethodGet, env.ns, authnAppA, tok, http.StatusOK, ""))
			f, err := os.OpenFile(env.revocationFile, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fmt.Fprintln(f, id); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the revoked token is refused", env.expect(t, http.MethodGet, env.ns, authnAppA, tok, http.StatusUnauthorized, ""))
		})
		t.Run("a project token whose role was deleted is 401", func(t *testing.T) {
			tok, _ := env.projectToken(t, env.ns+"/"+authnProjectA, "temp", time.Hour)
			tokens = append(tokens, tok)
			eventually(t, "the temp role works", env.expect(t, http.MethodGet, env.ns, authnAppA, tok, http.StatusOK, ""))
			patch := []byte(`{"spec":{"roles":[{"name":"deployer","groups":["` + authnGroup + `"]}]}}`)
			if _, err := dynamic.NewForConfigOrDie(cp.Admin).Resource(authnAppProjects).Namespace(env.ns).
				Patch(t.Context(), authnProjectA, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the deleted role's token is refused", env.expect(t, http.MethodGet, env.ns, authnAppA, tok, http.StatusUnauthorized, ""))
		})
	})
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/tokenreview"
)

// runTokenCLI runs deputy with args and returns the exit code, stdout and stderr.
func runTokenCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := execute(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

const tokenTestPolicy = `apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: alpha, namespace: team-a}
spec:
  sourceRepos: ["*"]
  roles:
  - name: deployer
    groups: [team-a-deployers]
`

func TestTokenKeygenAndCreate(t *testing.T) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "key.pem"), filepath.Join(dir, "key.pub")
	if code, out, stderr := runTokenCLI(t, "token", "keygen", "--private-key", priv, "--public-key", pub); code != 0 || !strings.Contains(out, "kid ") {
		t.Fatalf("keygen: exit %d, out %q, stderr %q", code, out, stderr)
	}
	if st, err := os.Stat(priv); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode = %v, %v; want 0600", st.Mode(), err)
	}
	t.Run("keygen does not overwrite a key without --force", func(t *testing.T) {
		code, _, stderr := runTokenCLI(t, "token", "keygen", "--private-key", priv, "--public-key", pub)
		if code == 0 || !strings.Contains(stderr, "--force") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})

	policyDir := filepath.Join(dir, "policy")
	if err := os.Mkdir(policyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policyDir, "projects.yaml"), []byte(tokenTestPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	vk, err := tokenreview.LoadVerificationKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := tokenreview.NewProjectTokenAuthenticator(tokenreview.ProjectTokenOptions{
		Issuer: config.DefaultProjectTokenIssuer, Keys: []*tokenreview.VerificationKey{vk}, APIAudiences: []string{config.DefaultAPIAudience},
		Roles: func(ns, name, role string) bool {
			return ns == "team-a" && name == "alpha" && role == "deployer"
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("create prints a token deputy accepts, and its ID on stderr", func(t *testing.T) {
		code, out, stderr := runTokenCLI(t, "token", "create", "--project", "team-a/alpha", "--role", "deployer", "--ttl", "1h", "--signing-key", priv, "--policy", policyDir)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		token := strings.TrimSpace(out)
		resp, ok, err := verifier.AuthenticateToken(context.Background(), token)
		if !ok || err != nil || resp.User.GetName() != "deputy:project:team-a/alpha:deployer" {
			t.Fatalf("the issued token does not authenticate: %v %v %v", resp, ok, err)
		}
		jti := strings.TrimPrefix(resp.User.GetExtra()[tokenreview.ExtraCredentialID][0], "JTI=")
		if !strings.Contains(stderr, "id="+jti) || !strings.Contains(stderr, "revocationFile") || strings.Contains(stderr, token) {
			t.Errorf("stderr %q must name the ID and how to revoke it, and not print the token", stderr)
		}
	})
	t.Run("create -o json names the ID, user and expiry", func(t *testing.T) {
		code, out, stderr := runTokenCLI(t, "token", "create", "--project", "team-a/alpha", "--role", "deployer", "--ttl", "30m",
			"--signing-key", priv, "--audience", "deputy", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		var got tokenCreateOutput
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if got.User != "deputy:project:team-a/alpha:deployer" || got.ID == "" || got.KeyID != vk.KeyID() ||
			len(got.Audiences) != 1 || got.Audiences[0] != "deputy" || time.Until(got.ExpiresAt) > 31*time.Minute {
			t.Errorf("output %+v", got)
		}
		ctx := authenticator.WithAudiences(context.Background(), authenticator.Audiences{"deputy"})
		if _, ok, _ := verifier.AuthenticateToken(ctx, got.Token); !ok {
			t.Error("the JSON token does not authenticate for its audience")
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown role is refused before issuing", []string{"--project", "team-a/alpha", "--role", "admin", "--signing-key", priv, "--policy", policyDir},
			`has no role "admin" (it has [deployer])`},
		{"an unknown project is refused before issuing", []string{"--project", "team-a/beta", "--role", "deployer", "--signing-key", priv, "--policy", policyDir},
			"has no deputy.dev AppProject team-a/beta"},
		{"a project without namespace is refused", []string{"--project", "alpha", "--role", "deployer", "--signing-key", priv}, "NAMESPACE/NAME"},
		{"no key names the flags to use", []string{"--project", "team-a/alpha", "--role", "deployer"}, "--signing-key"},
		{"a non-positive ttl is refused", []string{"--project", "team-a/alpha", "--role", "deployer", "--signing-key", priv, "--ttl", "0s"}, "--ttl"},
		{"a public key cannot sign", []string{"--project", "team-a/alpha", "--role", "deployer", "--signing-key", pub}, "deputy token keygen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runTokenCLI(t, append([]string{"token", "create"}, tc.args...)...)
			if code == 0 || out != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want failure mentioning %q", code, out, stderr, tc.want)
			}
		})
	}
}

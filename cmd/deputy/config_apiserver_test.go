package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/manifests"
)

// configAPIServer runs `deputy certs init` once and `deputy config apiserver`
// with args, returning the exit code, stdout, stderr and the output
// directory.
func configAPIServer(t *testing.T, args ...string) (int, string, string, string) {
	t.Helper()
	dir := t.TempDir()
	certDir, out := filepath.Join(dir, "certs"), filepath.Join(dir, "out")
	if code, _, stderr := runTokenCLI(t, "certs", "init", "--dir", certDir); code != 0 {
		t.Fatalf("certs init: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runTokenCLI(t, append([]string{"config", "apiserver", "--url", "https://127.0.0.1:8443",
		"--certs", certDir, "--out", out, "--dir", "/etc/kubernetes/deputy"}, args...)...)
	return code, stdout, stderr, out
}

func TestConfigAPIServerFailurePolicies(t *testing.T) {
	tests := []struct {
		name              string
		args              []string
		wantImpersonation string
		wantRest          string
	}{
		{name: "the defaults keep the gate closed and the rest open", wantImpersonation: "Deny", wantRest: "NoOpinion"},
		{name: "both Deny for a deputy outside the cluster", args: []string{"--failure-policy", "Deny"}, wantImpersonation: "Deny", wantRest: "Deny"},
		{name: "both NoOpinion", args: []string{"--impersonation-failure-policy", "NoOpinion"}, wantImpersonation: "NoOpinion", wantRest: "NoOpinion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr, out := configAPIServer(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			data, err := os.ReadFile(filepath.Join(out, manifests.AuthorizationConfigFile))
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				Authorizers []struct {
					Name    string
					Webhook *struct{ FailurePolicy string }
				}
			}
			if err := yaml.Unmarshal(data, &cfg); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, a := range cfg.Authorizers {
				if a.Webhook != nil {
					got[a.Name] = a.Webhook.FailurePolicy
				}
			}
			if got[manifests.ImpersonationAuthorizerName] != tt.wantImpersonation || got[manifests.AuthorizerName] != tt.wantRest {
				t.Errorf("failure policies %v, want %s: %s and %s: %s", got, manifests.ImpersonationAuthorizerName, tt.wantImpersonation, manifests.AuthorizerName, tt.wantRest)
			}
			if !strings.Contains(stdout, "--authorization-config=/etc/kubernetes/deputy/authorization-config.yaml") {
				t.Errorf("instructions do not name --authorization-config:\n%s", stdout)
			}
		})
	}
}

func TestConfigAPIServerLegacyFlags(t *testing.T) {
	code, stdout, stderr, out := configAPIServer(t, "--legacy-flags", "--authorized-ttl", "1m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"add    --authorization-mode=Node,Webhook,RBAC",
		"add    --authorization-webhook-config-file=/etc/kubernetes/deputy/authorization-webhook.kubeconfig",
		"add    --authorization-webhook-version=v1",
		"add    --authorization-webhook-cache-authorized-ttl=1m0s",
		"add    --authorization-webhook-cache-unauthorized-ttl=10s",
		"add    --authentication-token-webhook-config-file=/etc/kubernetes/deputy/authentication-webhook.kubeconfig",
		"remove --authorization-config",
		"The impersonation gate is OPEN",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(out, manifests.AuthorizationConfigFile)); err == nil {
		t.Errorf("--legacy-flags wrote %s, which those flags do not use", manifests.AuthorizationConfigFile)
	}

	for _, flag := range [][]string{{"--failure-policy", "Deny"}, {"--impersonation-failure-policy", "Deny"}, {"--timeout", "5s"}} {
		t.Run("refuses "+flag[0], func(t *testing.T) {
			code, _, stderr, _ := configAPIServer(t, append([]string{"--legacy-flags"}, flag...)...)
			if code == 0 || !strings.Contains(stderr, flag[0]+" cannot be used with --legacy-flags") {
				t.Errorf("exit %d, stderr %q", code, stderr)
			}
		})
	}
}

func TestConfigAPIServerRefusesABadServiceAccount(t *testing.T) {
	code, _, stderr, _ := configAPIServer(t, "--service-account", "deputy")
	if code == 0 || !strings.Contains(stderr, `deputy's ServiceAccount "deputy" must be namespace/name`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

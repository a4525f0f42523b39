package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"deputy.dev/deputy/config"
)

// captureServe runs the command line with a serve function that records the
// resolved configuration instead of serving.
func captureServe(t *testing.T, args ...string) (*config.DeputyConfiguration, string, error) {
	t.Helper()
	var got *config.DeputyConfiguration
	root := newRootCommand(func(_ context.Context, cfg *config.DeputyConfiguration, _ io.Writer) error {
		got = cfg
		return nil
	})
	var out bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	err := root.ExecuteContext(t.Context())
	return got, out.String(), err
}

func TestServeConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "deputy.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
listen: 0.0.0.0:9443
tls: {certDir: /from-file}
policy: {paths: [/file-policy]}
authorization: {defaultDecision: Deny}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, c *config.DeputyConfiguration)
	}{
		{"no flags and no file give the embedded default", []string{"serve"}, func(t *testing.T, c *config.DeputyConfiguration) {
			if c.Listen != config.DefaultListen || c.TLS.CertDir != config.DefaultCertDir || len(c.Policy.Paths) != 0 || c.Authorization.DefaultDecision != "NoOpinion" {
				t.Errorf("got %+v", c)
			}
		}},
		{"the file's fields are used", []string{"serve", "--config", file}, func(t *testing.T, c *config.DeputyConfiguration) {
			if c.Listen != "0.0.0.0:9443" || c.TLS.CertDir != "/from-file" || c.Policy.Paths[0] != "/file-policy" || c.Authorization.DefaultDecision != "Deny" {
				t.Errorf("got %+v", c)
			}
		}},
		{"flags override the file", []string{"serve", "--config", file, "--listen", "127.0.0.1:1", "--policy", "a", "--policy", "b", "--default-decision", "NoOpinion"}, func(t *testing.T, c *config.DeputyConfiguration) {
			if c.Listen != "127.0.0.1:1" || strings.Join(c.Policy.Paths, ",") != "a,b" || c.Authorization.DefaultDecision != "NoOpinion" {
				t.Errorf("got %+v", c)
			}
			if c.TLS.CertDir != "/from-file" {
				t.Errorf("a field without a flag must keep the file's value, got certDir %q", c.TLS.CertDir)
			}
		}},
		{"certificate files replace the default certificate directory", []string{"serve", "--tls-cert-file", "c.pem", "--tls-private-key-file", "k.pem"}, func(t *testing.T, c *config.DeputyConfiguration) {
			if c.TLS.CertDir != "" || c.TLS.CertFile != "c.pem" {
				t.Errorf("got %+v", c.TLS)
			}
		}},
		{"durations and booleans are flags too", []string{"serve", "--shutdown-delay", "5s", "--require-client-cert-for-validate", "--policy-poll-interval", "2m"}, func(t *testing.T, c *config.DeputyConfiguration) {
			if c.Shutdown.Delay.Duration != 5*time.Second || !c.TLS.RequireClientCertForValidate || c.Policy.PollInterval.Duration != 2*time.Minute {
				t.Errorf("got %+v", c)
			}
		}},
		{"cluster mode comes from --kubeconfig and --context", []string{"serve", "--kubeconfig", "/kc", "--context", "prod"}, func(t *testing.T, c *config.DeputyConfiguration) {
			if c.Cluster.Kubeconfig != "/kc" || c.Cluster.Context != "prod" || c.Cluster.InCluster {
				t.Errorf("got %+v", c.Cluster)
			}
		}},
		{"cluster mode comes from --in-cluster", []string{"serve", "--in-cluster"}, func(t *testing.T, c *config.DeputyConfiguration) {
			if !c.Cluster.InCluster || c.Cluster.Kubeconfig != "" {
				t.Errorf("got %+v", c.Cluster)
			}
		}},
		{"without cluster flags deputy stays in file mode", []string{"serve"}, func(t *testing.T, c *config.DeputyConfiguration) {
			if c.Cluster != (config.Cluster{}) {
				t.Errorf("got %+v", c.Cluster)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, out, err := captureServe(t, tc.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			tc.check(t, c)
		})
	}
}

func TestServeRejectsInvalidConfigurationWithEveryField(t *testing.T) {
	_, _, err := captureServe(t, "serve", "--listen", "nope", "--default-decision", "Allow", "--tls-cert-file", "only.pem")
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"listen:", "authorization.defaultDecision:", "tls.keyFile:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestServeRejectsConflictingClusterFlags(t *testing.T) {
	_, _, err := captureServe(t, "serve", "--kubeconfig", "/kc", "--in-cluster")
	if err == nil || !strings.Contains(err.Error(), "cluster.inCluster:") {
		t.Errorf("err = %v, want cluster.inCluster rejected", err)
	}
	_, _, err = captureServe(t, "serve", "--context", "prod")
	if err == nil || !strings.Contains(err.Error(), "cluster.context:") {
		t.Errorf("err = %v, want cluster.context without kubeconfig rejected", err)
	}
}

func TestCanIAnswersWithTheBindingAndExitCode(t *testing.T) {
	policy := filepath.Join("..", "..", "examples")
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"alice may list pods in team-a", []string{"can-i", "list", "pods", "-n", "team-a", "--as", "alice", "--policy", policy}, 0,
			[]string{"yes", `RoleBinding "alice-pod-reader/team-a" of ClusterRole "pod-reader" to User "alice"`, "rbac.yaml document 4"}},
		{"alice may not list pods in team-b", []string{"can-i", "list", "pods", "-n", "team-b", "--as", "alice", "--policy", policy}, 1,
			[]string{"no"}},
		{"group membership counts", []string{"can-i", "get", "configmaps", "-n", "team-b", "--as", "bob", "--as-group", "team-b-devs", "--policy", policy}, 0,
			[]string{"yes", `Group "team-b-devs"`}},
		{"a ServiceAccount user matches its ServiceAccount subject", []string{"can-i", "create", "deployments.apps", "-n", "guestbook", "--as", "system:serviceaccount:guestbook:guestbook-deployer", "--policy", policy}, 0,
			[]string{"yes", `ServiceAccount "guestbook-deployer/guestbook"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := execute(t.Context(), tc.args, &out, &errb)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d\n%s%s", code, tc.wantCode, out.String(), errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestValidateNamesTheBrokenFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: b}\nroleRef: {kind: Role, name: r}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := execute(t.Context(), []string{"validate", "--policy", dir}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, w := range []string{"bad.yaml: document 1 (line 1)", "metadata.namespace: Required value"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, errb.String())
		}
	}
}

// Every flag of deputy serve (but --config) must override a field; a flag
// added without an entry would be silently ignored.
func TestEveryServeFlagOverridesAField(t *testing.T) {
	cmd := newServeCommand(func(context.Context, *config.DeputyConfiguration, io.Writer) error { return nil })
	overrides := flagOverrides(&config.DeputyConfiguration{}, &serveFlags{})
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" || f.Name == "help" || f.Name == "print-config" {
			return
		}
		if _, ok := overrides[f.Name]; !ok {
			t.Errorf("flag --%s has no entry in flagOverrides", f.Name)
		}
	})
	for name := range overrides {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("flagOverrides has %q, which is not a flag", name)
		}
	}
}

// `can-i impersonate serviceaccounts/NAME` answers both checks
// kube-apiserver makes: the constrained one (what 1.36+ asks first, and the
// only one requireConstrained leaves to sync identities) and the legacy
// fallback; the constrained allow is a yes.
func TestCanIImpersonationAnswersBothShapes(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"can-i", "impersonate", "serviceaccounts/guestbook-deployer", "-n", "guestbook",
		"--as", "system:serviceaccount:argocd:argocd-application-controller",
		"--config", filepath.Join("..", "..", "examples", "config", "argocd.yaml"), "--policy", filepath.Join("..", "..", "examples", "argocd")}
	if code := execute(t.Context(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, w := range []string{"yes\n", "(impersonate:serviceaccount): yes", "destinationServiceAccounts[0] derives system:serviceaccount:guestbook:guestbook-deployer",
		"(impersonate): no", "requireConstrained"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}

package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if errs := Validate(c); len(errs) > 0 {
		t.Fatalf("the embedded default is invalid: %v", errs)
	}
	if c.Listen != "127.0.0.1:8443" || c.TLS.CertDir != ".deputy/certs" || c.Authorization.DefaultDecision != "NoOpinion" {
		t.Errorf("unexpected defaults: %+v", c)
	}
}

func TestSetDefaultsKeepsCertDirUnsetWhenCertFilesAreGiven(t *testing.T) {
	c := &DeputyConfiguration{TLS: TLS{CertFile: "a.crt", KeyFile: "a.key"}}
	SetDefaults(c)
	if c.TLS.CertDir != "" {
		t.Errorf("certDir = %q, want empty when certFile/keyFile are set", c.TLS.CertDir)
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		wantErr string
		check   func(t *testing.T, c *DeputyConfiguration)
	}{
		{
			name: "a complete file decodes",
			in: `apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
listen: ":9443"
tls: {certDir: /certs, allowedClientNames: [kube-apiserver, front-proxy]}
policy: {paths: [/etc/deputy/policy], pollInterval: 1m}
authorization: {defaultDecision: Deny}
authentication: {apiAudiences: [https://example]}
shutdown: {delay: 5s, gracePeriod: 20s}
logging: {level: debug, format: json}
`,
			check: func(t *testing.T, c *DeputyConfiguration) {
				if c.Listen != ":9443" || c.Policy.PollInterval.Duration != time.Minute || c.Shutdown.Delay.Duration != 5*time.Second {
					t.Errorf("decoded %+v", c)
				}
				if diff := cmp.Diff([]string{"kube-apiserver", "front-proxy"}, c.TLS.AllowedClientNames); diff != "" {
					t.Error(diff)
				}
			},
		},
		{name: "an unknown field is an error naming it", in: "apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\nlistn: x\n", wantErr: `unknown field "listn"`},
		{name: "a wrong-case field is an error", in: "apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\nListen: x\n", wantErr: `unknown field "Listen"`},
		{name: "a duplicate field is an error", in: "apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\nlisten: a\nlisten: b\n", wantErr: "listen"},
		{name: "a wrong kind is an error", in: "apiVersion: v1\nkind: ConfigMap\n", wantErr: "want config.deputy.dev/v1alpha1/DeputyConfiguration"},
		{name: "invalid YAML is an error naming the file", in: "listen: [", wantErr: "deputy.yaml: not valid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode("deputy.yaml", []byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestValidateReportsEveryErrorWithItsField(t *testing.T) {
	c := Default()
	c.Listen = "nonsense"
	c.TLS.CertFile = "only-cert.pem"
	c.TLS.MinVersion = "VersionTLS10"
	c.Authorization.DefaultDecision = "Allow"
	c.Logging.Level = "loud"
	c.Policy.PollInterval.Duration = time.Millisecond
	errs := Validate(c)
	var fields []string
	for _, e := range errs {
		fields = append(fields, e.Field)
	}
	want := []string{"listen", "tls.keyFile", "tls.minVersion", "policy.pollInterval", "authorization.defaultDecision", "logging.level"}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("fields (-want +got):\n%s\nerrors: %v", diff, errs)
	}
}

func TestDecisionLogSettings(t *testing.T) {
	c := Default()
	if c.Logging.Decisions != "none" || c.Logging.DecisionSampleRate == nil || *c.Logging.DecisionSampleRate != 1 {
		t.Errorf("decision log defaults: %q, %v; want none, 1", c.Logging.Decisions, c.Logging.DecisionSampleRate)
	}
	for _, tt := range []struct {
		name      string
		decisions string
		rate      float64
		wantField string
		wantHint  string
	}{
		{"denied at a tenth is valid", "denied", 0.1, "", ""},
		{"all at the full rate is valid", "all", 1, "", ""},
		{"an unknown mode names the modes", "deny", 1, "logging.decisions", `"none", "denied", "all"`},
		{"a zero rate says how to log nothing", "all", 0, "logging.decisionSampleRate", "logging.decisions: none"},
		{"a rate above one is refused", "all", 1.5, "logging.decisionSampleRate", "(0, 1]"},
		{"a negative rate is refused", "denied", -0.5, "logging.decisionSampleRate", "(0, 1]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Logging.Decisions, c.Logging.DecisionSampleRate = tt.decisions, &tt.rate
			errs := Validate(c)
			if tt.wantField == "" {
				if len(errs) > 0 {
					t.Errorf("errors %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tt.wantField || !strings.Contains(errs[0].Error(), tt.wantHint) {
				t.Errorf("errors %v, want one on %s saying %s", errs, tt.wantField, tt.wantHint)
			}
		})
	}
}

func TestSyncDefaults(t *testing.T) {
	c := Default()
	if c.Sync.Impersonation.Enabled || !c.Sync.Impersonation.IsEnforced() || c.Sync.CacheDir != ".deputy/repos" || c.Sync.Parallelism != 8 ||
		c.Sync.HealthTimeout.Duration != 5*time.Minute {
		t.Errorf("sync defaults: %+v, want impersonation disabled and enforced (Argo CD's defaults), .deputy/repos, 8, health timeout 5m", c.Sync)
	}
	if len(c.Sync.Clusters) != 0 {
		t.Errorf("file mode registers no cluster by default, got %+v", c.Sync.Clusters)
	}
	if (SyncImpersonation{}).IsEnforced() != true {
		t.Error("an unset enforced must mean true")
	}

	inCluster := &DeputyConfiguration{Cluster: Cluster{Kubeconfig: "/kc", Context: "prod"}}
	SetDefaults(inCluster)
	want := []SyncCluster{{Name: "in-cluster", Server: "https://kubernetes.default.svc", Kubeconfig: "/kc", Context: "prod"}}
	if diff := cmp.Diff(want, inCluster.Sync.Clusters); diff != "" {
		t.Errorf("cluster mode registers the cluster it reads (-want +got):\n%s", diff)
	}
	if errs := Validate(inCluster); len(errs) > 0 {
		t.Errorf("the defaulted cluster-mode configuration is invalid: %v", errs)
	}

	explicit := &DeputyConfiguration{Cluster: Cluster{InCluster: true}, Sync: Sync{Clusters: []SyncCluster{{Name: "prod", Server: "https://prod:6443", Kubeconfig: "/prod"}}}}
	SetDefaults(explicit)
	if len(explicit.Sync.Clusters) != 1 || explicit.Sync.Clusters[0].Name != "prod" {
		t.Errorf("an explicit registry must be kept as is, got %+v", explicit.Sync.Clusters)
	}
}

func TestDecodeSyncSection(t *testing.T) {
	c, err := Decode("deputy.yaml", []byte(`apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
cluster: {inCluster: true}
sync:
  impersonation: {enabled: true, enforced: false}
  clusters:
  - {name: in-cluster, server: "https://kubernetes.default.svc", inCluster: true}
  - {name: prod, server: "https://prod.example:6443", kubeconfig: /etc/deputy/prod.kubeconfig, context: admin}
  repositories:
  - {url: "https://github.com/example/", usernameFile: /creds/user, passwordFile: /creds/token}
  - {url: "https://git.example/", secret: {namespace: deputy-system, name: git-creds}}
  cacheDir: /var/cache/deputy
  parallelism: 4
  healthTimeout: 90s
`))
	if err != nil {
		t.Fatal(err)
	}
	SetDefaults(c)
	if errs := Validate(c); len(errs) > 0 {
		t.Fatalf("valid sync section rejected: %v", errs)
	}
	if !c.Sync.Impersonation.Enabled || c.Sync.Impersonation.IsEnforced() || c.Sync.Parallelism != 4 || c.Sync.CacheDir != "/var/cache/deputy" ||
		c.Sync.HealthTimeout.Duration != 90*time.Second ||
		len(c.Sync.Clusters) != 2 || c.Sync.Repositories[1].Secret.Name != "git-creds" {
		t.Errorf("decoded %+v", c.Sync)
	}
	if _, err := Decode("deputy.yaml", []byte("apiVersion: config.deputy.dev/v1alpha1\nkind: DeputyConfiguration\nsync: {paralelism: 3}\n")); err == nil || !strings.Contains(err.Error(), `unknown field "sync.paralelism"`) {
		t.Errorf("err = %v, want the misspelt field named", err)
	}
}

func TestValidateSync(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(c *DeputyConfiguration)
		want   []string // "field: message fragment"
	}{
		{"parallelism below one is rejected", func(c *DeputyConfiguration) { c.Sync.Parallelism = -1 },
			[]string{"sync.parallelism: Invalid value: -1: must be between 1 and 256"}},
		{"parallelism above the bound is rejected", func(c *DeputyConfiguration) { c.Sync.Parallelism = 1000 },
			[]string{"sync.parallelism: Invalid value: 1000"}},
		{"a blank cache dir is rejected", func(c *DeputyConfiguration) { c.Sync.CacheDir = " " },
			[]string{"sync.cacheDir: Required value"}},
		{"a health timeout below a second is rejected", func(c *DeputyConfiguration) { c.Sync.HealthTimeout.Duration = time.Millisecond },
			[]string{`sync.healthTimeout: Invalid value: "1ms": must be at least 1s`}},
		{"a health timeout beyond the operation timeout is rejected, naming both", func(c *DeputyConfiguration) { c.Sync.HealthTimeout.Duration = time.Hour },
			[]string{`sync.healthTimeout: Invalid value: "1h0m0s": must not exceed sync.limits.operationTimeout (30m0s)`}},
		{"a cluster needs a name, a server URL and a connection", func(c *DeputyConfiguration) {
			c.Sync.Clusters = []SyncCluster{{}}
		}, []string{
			"sync.clusters[0].name: Required value",
			"sync.clusters[0].server: Invalid value",
			"sync.clusters[0].kubeconfig: Required value: say how to connect",
		}},
		{"a cluster connects one way only", func(c *DeputyConfiguration) {
			c.Sync.Clusters = []SyncCluster{{Name: "a", Server: "https://a", Kubeconfig: "/kc", InCluster: true}, {Name: "b", Server: "https://b", InCluster: true, Context: "x"}}
		}, []string{
			"sync.clusters[0].inCluster: Invalid value: true: set either kubeconfig or inCluster, not both",
			"sync.clusters[1].context: Invalid value: \"x\": a context needs kubeconfig",
		}},
		{"cluster names and servers are unique", func(c *DeputyConfiguration) {
			c.Sync.Clusters = []SyncCluster{{Name: "a", Server: "https://a", InCluster: true}, {Name: "a", Server: "https://a", Kubeconfig: "/kc"}}
		}, []string{
			"sync.clusters[1].name: Duplicate value: \"a (also clusters[0])\"",
			"sync.clusters[1].server: Duplicate value: \"https://a (also clusters[0])\"",
		}},
		{"a cluster name is a DNS name and a server is a URL", func(c *DeputyConfiguration) {
			c.Sync.Clusters = []SyncCluster{{Name: "In Cluster", Server: "kubernetes.default.svc", InCluster: true}}
		}, []string{
			"sync.clusters[0].name: Invalid value: \"In Cluster\"",
			"sync.clusters[0].server: Invalid value: \"kubernetes.default.svc\"",
		}},
		{"repository credentials need a URL and one source", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{}, {URL: "https://a/", PasswordFile: "/p"}, {URL: "https://b/", UsernameFile: "/u", PasswordFile: "/p", Secret: &SecretReference{Namespace: "ns", Name: "s"}}}
		}, []string{
			"sync.repositories[0].url: Invalid value",
			"sync.repositories[0]: Required value: set usernameFile and passwordFile, or secret",
			"sync.repositories[1].usernameFile: Required value",
			"sync.repositories[2].secret: Invalid value: \"ns/s\": set either usernameFile and passwordFile or secret, not both",
			"sync.repositories[2].secret: Invalid value: \"ns/s\": a Secret is read from the cluster: it needs cluster mode",
		}},
		{"a Secret needs its namespace and name", func(c *DeputyConfiguration) {
			c.Cluster.InCluster = true
			c.Sync.Repositories = []RepositoryCredentials{{URL: "https://a/", Secret: &SecretReference{}}}
		}, []string{
			"sync.repositories[0].secret.namespace: Required value",
			"sync.repositories[0].secret.name: Required value",
		}},
		{"repository URL prefixes are unique", func(c *DeputyConfiguration) {
			c.Sync.Repositories = []RepositoryCredentials{{URL: "https://a/", UsernameFile: "/u", PasswordFile: "/p"}, {URL: "https://a/", UsernameFile: "/u", PasswordFile: "/p"}}
		}, []string{"sync.repositories[1].url: Duplicate value: \"https://a/ (also repositories[0])\""}},
		{"every problem is reported at once, next to the others", func(c *DeputyConfiguration) {
			c.Listen = "nonsense"
			c.Sync.Parallelism = 0
			c.Sync.Clusters = []SyncCluster{{Name: "x", Server: "https://x"}}
		}, []string{
			"listen: Invalid value",
			"sync.parallelism: Invalid value: 0",
			"sync.clusters[0].kubeconfig: Required value",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(c)
			errs := Validate(c)
			if len(errs) != len(tc.want) {
				t.Errorf("got %d errors, want %d:\n%v", len(errs), len(tc.want), errs)
			}
			for i, w := range tc.want {
				if i < len(errs) && !strings.HasPrefix(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to start with %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}

// The gate reads deputy.dev AppProjects where deputy's engine looks for
// them: an impersonator of deputy.dev projects without namespaces takes
// sync.projectNamespaces; others keep deputy's own namespace.
func TestImpersonatorNamespacesFollowProjectNamespaces(t *testing.T) {
	c := &DeputyConfiguration{Sync: Sync{ProjectNamespaces: []string{"platform"}}, Authorization: Authorization{Impersonation: Impersonation{
		Impersonators: []Impersonator{
			{ServiceAccount: "deputy-system/deputy"},
			{ServiceAccount: "argocd/argocd-application-controller", Projects: ProjectSource{APIGroups: []string{"argoproj.io"}}},
			{ServiceAccount: "ops/syncer", Projects: ProjectSource{APIGroups: []string{"deputy.dev"}, Namespaces: []string{"ops"}}},
		}}}}
	SetDefaults(c)
	got := c.Authorization.Impersonation.Impersonators
	for i, want := range [][]string{{"platform"}, {OwnNamespace()}, {"ops"}} {
		if strings.Join(got[i].Projects.Namespaces, ",") != strings.Join(want, ",") {
			t.Errorf("impersonators[%d].projects.namespaces = %v, want %v", i, got[i].Projects.Namespaces, want)
		}
	}
	d := Default()
	if ns := d.Authorization.Impersonation.Impersonators[0].Projects.Namespaces; len(ns) != 1 || ns[0] != d.Sync.ProjectNamespaces[0] {
		t.Errorf("default impersonator namespaces %v, project namespaces %v", ns, d.Sync.ProjectNamespaces)
	}
}

// A configuration that lowers sync.limits.operationTimeout below the health
// timeout's default gets a default that fits, not an error.
func TestHealthTimeoutDefaultFitsTheOperationTimeout(t *testing.T) {
	var s Sync
	s.Limits.OperationTimeout.Duration = 20 * time.Second
	SetSyncDefaults(&s, Cluster{})
	if s.HealthTimeout.Duration != 20*time.Second {
		t.Errorf("healthTimeout default = %s, want the 20s operation timeout", s.HealthTimeout.Duration)
	}
	var d Sync
	SetSyncDefaults(&d, Cluster{})
	if d.HealthTimeout.Duration != DefaultSyncHealthTimeout {
		t.Errorf("healthTimeout default = %s, want %s", d.HealthTimeout.Duration, DefaultSyncHealthTimeout)
	}
}

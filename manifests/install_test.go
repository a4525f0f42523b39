package manifests_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/apis/apiserver/load"
	apiservervalidation "k8s.io/apiserver/pkg/apis/apiserver/validation"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/manifests"
	"deputy.dev/deputy/policy"
)

// The install YAML under base/ is checked here against the Go code it must
// agree with; test/e2e renders it with kubectl and dry-runs it against a real
// kube-apiserver.

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.FromSlash(name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// documents splits a multi-document YAML file.
func documents(t *testing.T, name string) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(readFile(t, name))))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

func decodeStrict(t *testing.T, name string, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func baseDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	decodeStrict(t, "base/deployment.yaml", readFile(t, "base/deployment.yaml"), &d)
	return &d
}

// baseConfig is base/config.yaml as `deputy serve` resolves it in the Pod:
// the file, the Deployment's --in-cluster flag, then defaults.
func baseConfig(t *testing.T) *config.DeputyConfiguration {
	t.Helper()
	cfg, err := config.Decode("base/config.yaml", readFile(t, "base/config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cluster.InCluster = true
	config.SetDefaults(cfg)
	return cfg
}

func TestBaseConfigurationIsValid(t *testing.T) {
	cfg := baseConfig(t)
	if errs := config.Validate(cfg); len(errs) > 0 {
		t.Fatalf("base/config.yaml is invalid: %v", errs.ToAggregate())
	}
	if !cfg.Sync.Impersonation.Enabled {
		t.Errorf("sync.impersonation.enabled is false: syncs would run as deputy, which holds no permissions to apply anything")
	}
	if cfg.TLS.CertDir != "" {
		t.Errorf("tls.certDir = %q: in a cluster deputy must not generate development certificates", cfg.TLS.CertDir)
	}
	if len(cfg.Policy.Paths) == 0 {
		t.Errorf("policy.paths is empty: deputy would serve the embedded example policy and its demo tokens")
	}
}

func TestBasePolicyLoads(t *testing.T) {
	if _, err := policy.Load([]policy.SourceFile{{Name: "base/policy.yaml", Data: readFile(t, "base/policy.yaml")}}); err != nil {
		t.Fatal(err)
	}
}

// Every path the configuration names must be inside a volume the Deployment
// mounts from the right source, and the flags must be deputy's.
func TestBaseDeploymentMountsWhatTheConfigurationNames(t *testing.T) {
	d := baseDeployment(t)
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	// mountOf returns the volume holding p, and whether it is writable.
	mountOf := func(p string) (corev1.Volume, bool, bool) {
		for _, m := range c.VolumeMounts {
			if p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/") {
				return volumes[m.Name], !m.ReadOnly, true
			}
		}
		return corev1.Volume{}, false, false
	}
	var configFile string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			configFile = v
		}
	}
	if !slices.Contains(c.Args, "--in-cluster") || c.Args[0] != "serve" || configFile == "" {
		t.Errorf("args %q, want serve --config=FILE --in-cluster", c.Args)
	}
	cfg := baseConfig(t)
	for _, tc := range []struct {
		field, path string
		check       func(v corev1.Volume) bool
		writable    bool
	}{
		{"--config", configFile, func(v corev1.Volume) bool {
			return v.ConfigMap != nil && v.ConfigMap.Name == "deputy-config" && path.Base(configFile) == "config.yaml"
		}, false},
		{"tls.certFile", cfg.TLS.CertFile, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == "deputy-serving-cert" && path.Base(cfg.TLS.CertFile) == corev1.TLSCertKey
		}, false},
		{"tls.keyFile", cfg.TLS.KeyFile, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == "deputy-serving-cert" && path.Base(cfg.TLS.KeyFile) == corev1.TLSPrivateKeyKey
		}, false},
		{"tls.clientCAFile", cfg.TLS.ClientCAFile, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == "deputy-serving-cert" && path.Base(cfg.TLS.ClientCAFile) == certs.CACertFile
		}, false},
		{"policy.paths[0]", cfg.Policy.Paths[0], func(v corev1.Volume) bool {
			return v.ConfigMap != nil && v.ConfigMap.Name == "deputy-policy"
		}, false},
		{"sync.cacheDir", cfg.Sync.CacheDir, func(v corev1.Volume) bool { return v.EmptyDir != nil }, true},
	} {
		v, writable, ok := mountOf(tc.path)
		switch {
		case !ok:
			t.Errorf("%s %q is in no volume the container mounts", tc.field, tc.path)
		case !tc.check(v):
			t.Errorf("%s %q is in volume %q, not the expected source", tc.field, tc.path, v.Name)
		case writable != tc.writable:
			t.Errorf("%s %q: mount writable = %t, want %t", tc.field, tc.path, writable, tc.writable)
		}
	}
	for _, f := range []string{cfg.Sync.Webhook.GitHubSecretFile, cfg.Sync.Webhook.GitLabSecretFile, cfg.Sync.Webhook.TokenFile} {
		if f != "" {
			if v, _, ok := mountOf(f); !ok || v.Secret == nil || v.Secret.SecretName != "deputy-git-webhook" {
				t.Errorf("sync.webhook file %q is not in Secret deputy-git-webhook's volume", f)
			}
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8443 || !strings.HasSuffix(cfg.Listen, ":8443") {
		t.Errorf("container ports %v and listen %q disagree (want 8443)", c.Ports, cfg.Listen)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v, want an HTTPS GET", name, p)
		}
	}
	// Shutdown: /readyz red for shutdown.delay, then draining for up to
	// gracePeriod; the kubelet must not kill deputy before.
	need := cfg.Shutdown.Delay.Duration + cfg.Shutdown.GracePeriod.Duration
	if pod.TerminationGracePeriodSeconds == nil || float64(*pod.TerminationGracePeriodSeconds) <= need.Seconds() {
		t.Errorf("terminationGracePeriodSeconds %v, want more than shutdown.delay + shutdown.gracePeriod = %s", pod.TerminationGracePeriodSeconds, need)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["POD_NAMESPACE"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE = %+v, want the downward API metadata.namespace (the leader-election Lease's namespace)", e)
	}
}

// deputy's ServiceAccount holds no impersonation right: the authorization
// webhook grants it per sync. Its Role covers the leader-election Lease the
// configuration names.
func TestBaseRBACGrantsNoImpersonation(t *testing.T) {
	cfg := baseConfig(t)
	leaseName := cfg.Sync.LeaderElection.LeaseName
	var roles int
	leaseVerbs := map[string]bool{}
	for _, doc := range documents(t, "base/rbac.yaml") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		var rules []rbacv1.PolicyRule
		switch meta.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			decodeStrict(t, "base/rbac.yaml", doc, &r)
			rules = r.Rules
		case "Role":
			var r rbacv1.Role
			decodeStrict(t, "base/rbac.yaml", doc, &r)
			rules = r.Rules
		default:
			continue
		}
		roles++
		for _, r := range rules {
			for _, v := range r.Verbs {
				if v == "impersonate" || v == rbacv1.VerbAll || strings.HasPrefix(v, "impersonate") {
					t.Errorf("%s rule %v grants verb %q", meta.Kind, r, v)
				}
			}
			if slices.Contains(r.Resources, rbacv1.ResourceAll) || slices.Contains(r.APIGroups, rbacv1.APIGroupAll) {
				t.Errorf("%s rule %v uses a wildcard", meta.Kind, r)
			}
			if meta.Kind == "Role" && slices.Contains(r.Resources, "leases") && (len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, leaseName)) {
				for _, v := range r.Verbs {
					leaseVerbs[v] = true
				}
			}
		}
	}
	if roles != 2 {
		t.Errorf("found %d ClusterRoles and Roles, want 2", roles)
	}
	for _, v := range []string{"get", "create", "update"} {
		if !leaseVerbs[v] {
			t.Errorf("Role deputy lacks %s on Lease %q (sync.leaderElection.leaseName)", v, leaseName)
		}
	}
}

// The in-cluster admission webhooks are the ones `deputy config apiserver`
// writes, reached through the Service instead of a URL.
func TestBaseValidatingWebhookMatchesWhatConfigAPIServerWrites(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Init(dir, certs.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := certs.LoadAPIServerClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := manifests.APIServerFiles(manifests.APIServerOptions{URL: "https://10.96.0.100", CA: client.CA,
		ClientCert: client.Cert, ClientKey: client.Key, Dir: "/etc/kubernetes/deputy"})
	if err != nil {
		t.Fatal(err)
	}
	var generated, base admissionregistrationv1.ValidatingWebhookConfiguration
	for _, f := range files {
		if f.Name == manifests.ValidatingWebhookFile {
			decodeStrict(t, f.Name, f.Data, &generated)
		}
	}
	decodeStrict(t, "base/validatingwebhook.yaml", readFile(t, "base/validatingwebhook.yaml"), &base)
	port := int32(443)
	validate := manifests.ValidatePath
	want := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: "deputy-system", Name: "deputy", Path: &validate, Port: &port}}
	for i := range base.Webhooks {
		if diff := cmp.Diff(want, base.Webhooks[i].ClientConfig); diff != "" {
			t.Errorf("webhook %s clientConfig (-want +got):\n%s", base.Webhooks[i].Name, diff)
		}
		base.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{}
	}
	for i := range generated.Webhooks {
		generated.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{}
	}
	if diff := cmp.Diff(generated, base); diff != "" {
		t.Errorf("base/validatingwebhook.yaml differs from deputy config apiserver's (-generated +base):\n%s", diff)
	}
}

// The bootstrap authorization configuration is kube-apiserver's default
// --authorization-mode=Node,RBAC, and kube-apiserver loads and accepts it.
func TestBootstrapAuthorizationConfiguration(t *testing.T) {
	cfg, err := load.LoadFromFile(filepath.FromSlash("apiserver/authorization-config-bootstrap.yaml"))
	if err != nil {
		t.Fatalf("kube-apiserver would not load it: %v", err)
	}
	knownTypes := sets.New("AlwaysAllow", "AlwaysDeny", "ABAC", "Webhook", "RBAC", "Node")
	if errs := apiservervalidation.ValidateAuthorizationConfiguration(authorizationcel.NewDefaultCompiler(), nil, cfg, knownTypes, sets.New("Webhook")); len(errs) > 0 {
		t.Fatalf("kube-apiserver would reject it: %v", errs.ToAggregate())
	}
	var types []string
	for _, a := range cfg.Authorizers {
		types = append(types, string(a.Type))
	}
	if diff := cmp.Diff([]string{"Node", "RBAC"}, types); diff != "" {
		t.Errorf("authorizers (-want +got):\n%s", diff)
	}
}

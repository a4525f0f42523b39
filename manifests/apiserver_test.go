package manifests

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/apis/apiserver/load"
	apiservervalidation "k8s.io/apiserver/pkg/apis/apiserver/validation"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"deputy.dev/deputy/certs"
)

// pki creates a CA, serving and client certificates with package certs.
func pki(t *testing.T) (dir string, client certs.APIServerClient) {
	t.Helper()
	dir = t.TempDir()
	if _, err := certs.Init(dir, certs.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := certs.LoadAPIServerClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, client
}

func validOptions(c certs.APIServerClient) APIServerOptions {
	return APIServerOptions{URL: "https://127.0.0.1:8443", CA: c.CA, ClientCert: c.Cert, ClientKey: c.Key, Dir: "/etc/kubernetes/deputy"}
}

func fileMap(files []File) map[string]File {
	out := map[string]File{}
	for _, f := range files {
		out[f.Name] = f
	}
	return out
}

// TestAPIServerFilesGolden compares the rendered files, with the (random) PEM
// material replaced by placeholders, to testdata/apiserver/. Run with
// UPDATE_GOLDEN=1 to rewrite them.
func TestAPIServerFilesGolden(t *testing.T) {
	_, c := pki(t)
	tests := []struct {
		name string
		dir  string
		opts func(*APIServerOptions)
	}{
		{name: "defaults", dir: "defaults", opts: func(*APIServerOptions) {}},
		{name: "deny on failure, custom timings, ServiceAccount and a trailing slash", dir: "deny", opts: func(o *APIServerOptions) {
			o.URL = "https://deputy.example:9443/"
			o.FailurePolicy = FailurePolicyDeny
			o.AuthorizationTimeout = 30 * time.Second
			o.AuthorizedTTL = time.Minute
			o.UnauthorizedTTL = 5 * time.Second
			o.ServiceAccount = "gitops/deputy"
			o.Dir = "/srv/deputy/"
		}},
		{name: "legacy flags", dir: "legacy", opts: func(o *APIServerOptions) { o.LegacyFlags = true }},
	}
	redact := strings.NewReplacer(
		base64.StdEncoding.EncodeToString(c.CA), "<base64 ca.crt>",
		base64.StdEncoding.EncodeToString(c.Cert), "<base64 kube-apiserver-client.crt>",
		base64.StdEncoding.EncodeToString(c.Key), "<base64 kube-apiserver-client.key>",
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := validOptions(c)
			tt.opts(&opts)
			files, err := APIServerFiles(opts)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range files {
				names = append(names, f.Name)
				got := []byte(redact.Replace(string(f.Data)))
				golden := filepath.Join("testdata", "apiserver", tt.dir, f.Name)
				if os.Getenv("UPDATE_GOLDEN") == "1" {
					if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
				}
				if diff := cmp.Diff(string(want), string(got)); diff != "" {
					t.Errorf("%s differs from %s (-want +got; UPDATE_GOLDEN=1 rewrites it):\n%s", f.Name, golden, diff)
				}
			}
			want := []string{AuthorizationKubeconfigFile, AuthenticationKubeconfigFile, AuthorizationConfigFile, ValidatingWebhookFile, ReadmeFile}
			if tt.dir == "legacy" {
				want = slices.Delete(want, 2, 3) // the flags replace the AuthorizationConfiguration
			}
			if diff := cmp.Diff(want, names); diff != "" {
				t.Errorf("file names (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAPIServerFilesAreDeterministic(t *testing.T) {
	_, c := pki(t)
	a, err := APIServerFiles(validOptions(c))
	if err != nil {
		t.Fatal(err)
	}
	b, err := APIServerFiles(validOptions(c))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two renders differ:\n%s", diff)
	}
}

// TestKubeconfigsReachDeputy loads each webhook kubeconfig with client-go and
// makes the call kube-apiserver would make, against a TLS server using the
// serving certificate and requiring a client certificate from the same CA.
func TestKubeconfigsReachDeputy(t *testing.T) {
	dir, c := pki(t)
	serving, err := tls.LoadX509KeyPair(filepath.Join(dir, certs.ServingCertFile), filepath.Join(dir, certs.ServingKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	clientCAs, err := certutil.NewPool(filepath.Join(dir, certs.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	type call struct{ path, cn string }
	calls := make(chan call, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls <- call{r.URL.Path, r.TLS.PeerCertificates[0].Subject.CommonName}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()

	opts := validOptions(c)
	opts.URL = srv.URL // https://127.0.0.1:PORT, covered by the default hosts
	files := fileMap(mustFiles(t, opts))
	for name, wantPath := range map[string]string{AuthorizationKubeconfigFile: AuthorizePath, AuthenticationKubeconfigFile: AuthenticatePath} {
		t.Run(name, func(t *testing.T) {
			f := files[name]
			if f.Mode != 0o600 {
				t.Errorf("mode %04o, want 0600 (it holds the client key)", f.Mode)
			}
			cfg, err := clientcmd.Load(f.Data)
			if err != nil {
				t.Fatalf("clientcmd.Load: %v", err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			if ctx == nil {
				t.Fatalf("current-context %q does not exist", cfg.CurrentContext)
			}
			cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
			if cluster.Server != srv.URL+wantPath {
				t.Errorf("server = %q, want %q", cluster.Server, srv.URL+wantPath)
			}
			if !bytes.Equal(cluster.CertificateAuthorityData, c.CA) || !bytes.Equal(user.ClientCertificateData, c.Cert) || !bytes.Equal(user.ClientKeyData, c.Key) {
				t.Errorf("embedded CA / client certificate / key differ from the inputs")
			}

			restCfg, err := clientcmd.RESTConfigFromKubeConfig(f.Data)
			if err != nil {
				t.Fatal(err)
			}
			rt, err := rest.TransportFor(restCfg)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, restCfg.Host, nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatalf("call to deputy failed: %v", err)
			}
			resp.Body.Close()
			got := <-calls
			if got != (call{wantPath, certs.ClientCommonName}) {
				t.Errorf("deputy saw %+v, want path %q from CN %q", got, wantPath, certs.ClientCommonName)
			}
		})
	}
}

// TestAuthorizationConfigPassesKubeAPIServerValidation loads the file the way
// kube-apiserver does (strict decode, k8s.io/apiserver/pkg/apis/apiserver/load)
// and validates it with the authorizer types kube-apiserver knows
// (k8s.io/kubernetes pkg/kubeapiserver/authorizer/modes; only Webhook repeats).
func TestAuthorizationConfigPassesKubeAPIServerValidation(t *testing.T) {
	_, c := pki(t)
	out := t.TempDir() // validation stats the kubeconfig: render for this directory
	opts := validOptions(c)
	opts.Dir = out
	files := mustFiles(t, opts)
	if _, err := WriteFiles(out, files); err != nil {
		t.Fatal(err)
	}
	cfg, err := load.LoadFromFile(filepath.Join(out, AuthorizationConfigFile))
	if err != nil {
		t.Fatalf("kube-apiserver would not load %s: %v", AuthorizationConfigFile, err)
	}
	knownTypes := sets.New("AlwaysAllow", "AlwaysDeny", "ABAC", "Webhook", "RBAC", "Node")
	if errs := apiservervalidation.ValidateAuthorizationConfiguration(authorizationcel.NewDefaultCompiler(), nil, cfg, knownTypes, sets.New("Webhook")); len(errs) > 0 {
		t.Fatalf("kube-apiserver would reject %s: %v", AuthorizationConfigFile, errs.ToAggregate())
	}

	type authorizer struct{ Type, Name string }
	var got []authorizer
	for _, a := range cfg.Authorizers {
		got = append(got, authorizer{string(a.Type), a.Name})
	}
	want := []authorizer{{"Node", "node"}, {"Webhook", "deputy-impersonation"}, {"Webhook", "deputy"}, {"RBAC", "rbac"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("authorizers (-want +got):\n%s", diff)
	}
	for i, policy := range map[int]string{1: "Deny", 2: "NoOpinion"} {
		w := cfg.Authorizers[i].Webhook
		gotHook := []any{w.Timeout.Duration, w.AuthorizedTTL.Duration, w.UnauthorizedTTL.Duration, w.FailurePolicy, w.SubjectAccessReviewVersion,
			w.MatchConditionSubjectAccessReviewVersion, w.ConnectionInfo.Type, *w.ConnectionInfo.KubeConfigFile, w.MatchConditions[0].Expression}
		wantHook := []any{3 * time.Second, 30 * time.Second, 10 * time.Second, policy, "v1", "v1", "KubeConfigFile", filepath.Join(out, AuthorizationKubeconfigFile),
			"!('system:masters' in request.groups)"}
		if diff := cmp.Diff(wantHook, gotHook); diff != "" {
			t.Errorf("webhook %s (-want +got):\n%s", cfg.Authorizers[i].Name, diff)
		}
	}
}

func TestValidatingWebhookConfigurationDecodes(t *testing.T) {
	_, c := pki(t)
	files := fileMap(mustFiles(t, validOptions(c)))
	scheme := runtime.NewScheme()
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	obj, _, err := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer().Decode(files[ValidatingWebhookFile].Data, nil, nil)
	if err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	cfg, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	if !ok {
		t.Fatalf("decoded %T", obj)
	}
	if cfg.Name != "deputy" || len(cfg.Webhooks) != 2 {
		t.Fatalf("name %q with %d webhooks, want deputy with 2", cfg.Name, len(cfg.Webhooks))
	}
	wantHooks := [][]any{
		{"appprojects.deputy.dev", "https://127.0.0.1:8443/validate", true, true,
			[]admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, []string{"argoproj.io", "deputy.dev"}, []string{"v1alpha1"}, []string{"appprojects"},
			admissionregistrationv1.NamespacedScope, 1,
			admissionregistrationv1.Fail, admissionregistrationv1.Equivalent, admissionregistrationv1.SideEffectClassNone, int32(10), []string{"v1"}},
		// Fails open: a deputy outage must not block every Role and
		// ClusterRole write; the gate ignores the rules it checks anyway.
		{"impersonation-rbac.deputy.dev", "https://127.0.0.1:8443/validate", true, true,
			[]admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, []string{"rbac.authorization.k8s.io"}, []string{"v1"}, []string{"roles", "clusterroles"},
			admissionregistrationv1.AllScopes, 1,
			admissionregistrationv1.Ignore, admissionregistrationv1.Equivalent, admissionregistrationv1.SideEffectClassNone, int32(5), []string{"v1"}},
	}
	for i, w := range cfg.Webhooks {
		r := w.Rules[0]
		got := []any{w.Name, *w.ClientConfig.URL, w.ClientConfig.Service == nil, bytes.Equal(w.ClientConfig.CABundle, c.CA),
			r.Operations, r.APIGroups, r.APIVersions, r.Resources, *r.Scope, len(w.Rules),
			*w.FailurePolicy, *w.MatchPolicy, *w.SideEffects, *w.TimeoutSeconds, w.AdmissionReviewVersions}
		if diff := cmp.Diff(wantHooks[i], got); diff != "" {
			t.Errorf("webhook %d (-want +got):\n%s", i, diff)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(w.ClientConfig.CABundle) {
			t.Errorf("webhook %d: caBundle is not PEM certificates", i)
		}
		if len(w.MatchConditions) != 0 || w.NamespaceSelector != nil || w.ObjectSelector != nil {
			t.Errorf("webhook %d: selectors or match conditions would let objects skip deputy", i)
		}
	}
	for _, s := range []string{"appprojects.deputy.dev: failurePolicy Fail", "impersonation-rbac.deputy.dev: failurePolicy Ignore"} {
		if !bytes.Contains(files[ValidatingWebhookFile].Data, []byte("# "+s)) {
			t.Errorf("%s does not explain %q in a comment", ValidatingWebhookFile, s)
		}
	}
}

func TestAPIServerFilesRejectsBadOptions(t *testing.T) {
	_, c := pki(t)
	tests := []struct {
		name    string
		mutate  func(*APIServerOptions)
		wantErr []string
	}{
		{name: "an empty URL", mutate: func(o *APIServerOptions) { o.URL = "" }, wantErr: []string{"url is empty", "https://HOST:PORT"}},
		{name: "plain http", mutate: func(o *APIServerOptions) { o.URL = "http://127.0.0.1:8443" }, wantErr: []string{`"http://127.0.0.1:8443"`, "must use https"}},
		{name: "a URL without scheme", mutate: func(o *APIServerOptions) { o.URL = "127.0.0.1:8443" }, wantErr: []string{"https://HOST:PORT"}},
		{name: "a host-less URL", mutate: func(o *APIServerOptions) { o.URL = "https:///authorize" }, wantErr: []string{"has no host"}},
		{name: "a URL with a path", mutate: func(o *APIServerOptions) { o.URL = "https://deputy:8443/authorize" }, wantErr: []string{"must not have a path", "/authorize, /authenticate and /validate"}},
		{name: "a URL with a query", mutate: func(o *APIServerOptions) { o.URL = "https://deputy:8443/?x=1" }, wantErr: []string{"query or fragment"}},
		{name: "a URL with a fragment", mutate: func(o *APIServerOptions) { o.URL = "https://deputy:8443#x" }, wantErr: []string{"query or fragment"}},
		{name: "a URL with credentials", mutate: func(o *APIServerOptions) { o.URL = "https://u:p@deputy:8443" }, wantErr: []string{"credentials"}},
		{name: "a URL with port 0", mutate: func(o *APIServerOptions) { o.URL = "https://deputy:0" }, wantErr: []string{"invalid port"}},
		{name: "a URL that does not parse", mutate: func(o *APIServerOptions) { o.URL = "https://deputy:port" }, wantErr: []string{"does not parse"}},
		{name: "a timeout above 30s", mutate: func(o *APIServerOptions) { o.AuthorizationTimeout = 31 * time.Second }, wantErr: []string{"timeout 31s", "at most 30s"}},
		{name: "a negative TTL", mutate: func(o *APIServerOptions) { o.UnauthorizedTTL = -time.Second }, wantErr: []string{"unauthorized TTL"}},
		{name: "an unknown failure policy", mutate: func(o *APIServerOptions) { o.FailurePolicy = "Allow" }, wantErr: []string{`failure policy "Allow"`, "Deny or NoOpinion"}},
		{name: "an unknown impersonation failure policy", mutate: func(o *APIServerOptions) { o.ImpersonationFailurePolicy = "Fail" }, wantErr: []string{`impersonation failure policy "Fail"`, "Deny or NoOpinion"}},
		{name: "a ServiceAccount without namespace", mutate: func(o *APIServerOptions) { o.ServiceAccount = "deputy" }, wantErr: []string{`ServiceAccount "deputy" must be namespace/name`}},
		{name: "a ServiceAccount with a quote", mutate: func(o *APIServerOptions) { o.ServiceAccount = "ns/a'b" }, wantErr: []string{`ServiceAccount "ns/a'b" must be namespace/name`}},
		{name: "a failure policy with the legacy flags", mutate: func(o *APIServerOptions) { o.LegacyFlags, o.ImpersonationFailurePolicy = true, "Deny" }, wantErr: []string{"failure policies cannot be set with the legacy flags"}},
		{name: "a timeout with the legacy flags", mutate: func(o *APIServerOptions) { o.LegacyFlags, o.AuthorizationTimeout = true, time.Second }, wantErr: []string{"timeout 1s cannot be set with the legacy flags"}},
		{name: "a relative node directory", mutate: func(o *APIServerOptions) { o.Dir = "apiserver" }, wantErr: []string{`"apiserver"`, "absolute"}},
		{name: "no node directory", mutate: func(o *APIServerOptions) { o.Dir = "" }, wantErr: []string{"control-plane node is empty"}},
		{name: "a key in place of the CA", mutate: func(o *APIServerOptions) { o.CA = c.Key }, wantErr: []string{"CA bundle is not PEM certificates"}},
		{name: "a missing client key", mutate: func(o *APIServerOptions) { o.ClientKey = nil }, wantErr: []string{"client key is empty"}},
		{
			name:    "several problems at once",
			mutate:  func(o *APIServerOptions) { o.URL, o.FailurePolicy, o.ClientCert = "http://x", "deny", []byte("x") },
			wantErr: []string{"must use https", `"deny"`, "client certificate is not a PEM certificate"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := validOptions(c)
			tt.mutate(&opts)
			files, err := APIServerFiles(opts)
			if err == nil {
				t.Fatalf("APIServerFiles accepted %+v and rendered %d files", opts, len(files))
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestAPIServerInstructions(t *testing.T) {
	opts := APIServerOptions{URL: "https://10.0.0.5:8443", Dir: "/etc/kubernetes/deputy"}
	got := APIServerInstructions(opts, "out")
	for _, want := range []string{
		"from out/ to /etc/kubernetes/deputy/",
		"remove --authorization-mode",
		"--authorization-config=/etc/kubernetes/deputy/authorization-config.yaml",
		"--authentication-token-webhook-config-file=/etc/kubernetes/deputy/authentication-webhook.kubeconfig",
		"--authentication-token-webhook-version=v1",
		"--authentication-token-webhook-cache-ttl",
		"kubectl apply -f manifests/crds/deputy.dev_appprojects.yaml",
		"kubectl apply -f " + filepath.Join("out", ValidatingWebhookFile),
		"impersonation is denied (deputy-impersonation, failurePolicy Deny): the gate stays closed",
		"everything else is what Node and RBAC allow (deputy, failurePolicy NoOpinion)",
		"deputy's ServiceAccount deputy-system/deputy",
		"Roles and ClusterRoles are\n  admitted unchecked (impersonation-rbac.deputy.dev, failurePolicy Ignore",
		"AppProject writes fail (appprojects.deputy.dev, failurePolicy Fail)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("instructions lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "argoproj.io") {
		t.Errorf("instructions must not tell operators to apply the test-only argoproj.io CRD:\n%s", got)
	}
	out, err := filepath.Abs("out")
	if err != nil {
		t.Fatal(err)
	}
	if got := APIServerInstructions(APIServerOptions{URL: opts.URL, Dir: out}, "out"); !strings.Contains(got, "already where kube-apiserver will read them ("+out+"/)") {
		t.Errorf("instructions for files rendered in place still ask to copy them:\n%s", got)
	}
	opts.FailurePolicy, opts.ImpersonationFailurePolicy = FailurePolicyDeny, FailurePolicyNoOpinion
	if got := APIServerInstructions(opts, ""); !strings.Contains(got, "the gate is OPEN") || !strings.Contains(got, "everything else is denied (deputy, failurePolicy Deny)") ||
		!strings.Contains(got, "kubectl apply -f "+ValidatingWebhookFile+"\n") {
		t.Errorf("README instructions wrong:\n%s", got)
	}
	legacy := APIServerInstructions(APIServerOptions{URL: opts.URL, Dir: opts.Dir, LegacyFlags: true}, "out")
	for _, want := range []string{
		"remove --authorization-config",
		"add    --authorization-mode=Node,Webhook,RBAC",
		"add    --authorization-webhook-config-file=/etc/kubernetes/deputy/authorization-webhook.kubeconfig",
		"add    --authorization-webhook-cache-unauthorized-ttl=10s",
		"The impersonation gate is OPEN",
		"waits up to 30s",
	} {
		if !strings.Contains(legacy, want) {
			t.Errorf("legacy instructions lack %q:\n%s", want, legacy)
		}
	}
	if strings.Contains(legacy, AuthorizationConfigFile) {
		t.Errorf("legacy instructions name %s:\n%s", AuthorizationConfigFile, legacy)
	}
}

func TestWriteFiles(t *testing.T) {
	out := filepath.Join(t.TempDir(), "apiserver")
	files := []File{{Name: "a.kubeconfig", Data: []byte("secret"), Mode: 0o600}, {Name: "b.yaml", Data: []byte("public"), Mode: 0o644}}
	for range 2 { // the second run replaces the files
		paths, err := WriteFiles(out, files)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{filepath.Join(out, "a.kubeconfig"), filepath.Join(out, "b.yaml")}, paths); diff != "" {
			t.Errorf("paths (-want +got):\n%s", diff)
		}
	}
	info, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o700 {
		t.Errorf("output directory mode %04o, want 0700", info.Mode().Perm())
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 2 {
		t.Errorf("output directory holds %d entries, want 2 (no temporary files)", len(entries))
	}
	for _, f := range files {
		info, err := os.Stat(filepath.Join(out, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != f.Mode {
			t.Errorf("%s: mode %04o, want %04o", f.Name, info.Mode().Perm(), f.Mode)
		}
	}
	if _, err := WriteFiles(out, []File{{Name: "../escape", Data: nil, Mode: 0o644}}); err == nil {
		t.Errorf("WriteFiles accepted a name with a path")
	}
}

func mustFiles(t *testing.T, opts APIServerOptions) []File {
	t.Helper()
	files, err := APIServerFiles(opts)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/union"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/apps"
	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/tokenreview"
	"deputy.dev/deputy/webhook"
)

const (
	syncAliceToken = "cli-alice-token"
	syncBobToken   = "cli-bob-token"
)

// syncTestPolicy: alice and the development client certificate's user
// (kube-apiserver) may sync, read and diff Applications in guestbook; bob
// may not.
var syncTestPolicy = []policy.SourceFile{
	{Name: "apps.yaml", Data: []byte(`apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: guestbook, namespace: guestbook}
spec: {sourceRepos: ["*"]}
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: guestbook, namespace: guestbook}
spec:
  project: guestbook
  source: {repoURL: https://example.test/guestbook.git}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: broken, namespace: guestbook}
spec:
  project: guestbook
  source: {repoURL: https://example.test/guestbook.git}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: flaky, namespace: guestbook}
spec:
  project: guestbook
  source: {repoURL: https://example.test/guestbook.git}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
  syncPolicy: {retry: {limit: 1, backoff: {duration: 10ms}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: syncer, namespace: guestbook}
rules:
- {apiGroups: [deputy.dev], resources: [applications/sync], verbs: [create]}
- {apiGroups: [deputy.dev], resources: [applications, applications/diff], verbs: [get]}
- {apiGroups: [deputy.dev], resources: [applications/diff], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: syncers, namespace: guestbook}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: syncer}
subjects:
- {kind: User, name: alice}
- {kind: User, name: kube-apiserver}
`)},
	{Name: "tokens.csv", Data: []byte(syncAliceToken + ",alice,alice-uid\n" + syncBobToken + ",bob,bob-uid\n")},
}

// cliRunner syncs guestbook/guestbook (two resources, Succeeded), fails
// guestbook/broken with a preflight report, and runs guestbook/flaky
// (flakyRun) once a watch follows it; it records the requests.
type cliRunner struct {
	mu   sync.Mutex
	reqs []syncer.Request
	// watching is closed when a watch of an Application began.
	watching chan struct{}
}

func (r *cliRunner) Run(ctx context.Context, req syncer.Request, progress syncer.Progress) *v1alpha1.OperationState {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	id := "system:serviceaccount:guestbook:guestbook-deployer"
	if req.Application.Name == "flaky" {
		return flakyRun(ctx, r.watching, req, progress)
	}
	if req.Application.Name == "broken" {
		return &v1alpha1.OperationState{Phase: v1alpha1.OperationFailed, Identity: id,
			Message: "preflight: system:serviceaccount:guestbook:guestbook-deployer lacks 1 permission:\n  create deployments.apps in guestbook"}
	}
	web := &v1alpha1.ResourceResult{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "guestbook", Name: "web", Status: v1alpha1.ResultCodeSynced}
	ns := &v1alpha1.ResourceResult{Version: "v1", Kind: "Namespace", Name: "guestbook", Status: v1alpha1.ResultCodeSynced}
	progress(&v1alpha1.OperationState{Phase: v1alpha1.OperationRunning, Identity: id}, nil)
	progress(nil, ns)
	progress(nil, web)
	return &v1alpha1.OperationState{Phase: v1alpha1.OperationSucceeded, Message: "successfully synced", Identity: id,
		SyncResult: &v1alpha1.SyncOperationResult{Revision: "0123abc", Resources: []*v1alpha1.ResourceResult{ns, web}}}
}

type syncServer struct {
	url    string
	caFile string
	runner *cliRunner
	differ *cliDiffer
}

// startSyncServer serves deputy's API over TLS with cert (nil: httptest's own)
// and client certificates verified against clientCA (nil: none).
func startSyncServer(t *testing.T, cert *tls.Certificate, clientCA *x509.CertPool) *syncServer {
	t.Helper()
	snap, err := policy.Load(syncTestPolicy)
	if err != nil {
		t.Fatal(err)
	}
	current := func() *policy.Snapshot { return snap }
	runner, differ := &cliRunner{watching: make(chan struct{})}, &cliDiffer{}
	ops := apps.NewFile(apps.FileOptions{Snapshot: current, ProjectNamespaces: []string{"guestbook"}, Runner: runner,
		Differ: differ, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ops.Shutdown(ctx)
	})
	authz, err := deputyauthz.New(deputyauthz.Options{}, union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: deputyauthz.NewRBAC(current)})
	if err != nil {
		t.Fatal(err)
	}
	var verify func() (x509.VerifyOptions, bool)
	if clientCA != nil {
		verify = func() (x509.VerifyOptions, bool) {
			return x509.VerifyOptions{Roots: clientCA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
		}
	}
	auds := []string{"https://kubernetes.default.svc.cluster.local"}
	apiAuthz, err := webhook.NewAPIAuthorizer(nil, authz, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := webhook.NewAPIHandler(webhook.APIOptions{
		Authenticator: webhook.NewAPIAuthenticator(webhook.APIAuthenticationOptions{
			Tokens: tokenreview.NewChain(auds, func() *policy.TokenSet { return snap.TokenSetOf() }), ClientCA: verify}),
		APIAudiences: auds,
		Authorizer:   apiAuthz,
		Applications: watchSignal{Applications: ops, watching: runner.watching, once: &sync.Once{}},
	})
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	if cert != nil {
		srv.TLS.Certificates = []tls.Certificate{*cert}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s := &syncServer{url: srv.URL, runner: runner, differ: differ}
	if cert == nil {
		s.caFile = filepath.Join(t.TempDir(), "ca.crt")
		data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		if err := os.WriteFile(s.caFile, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := execute(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeToken(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSyncWaitPrintsEveryResourceAndTheIdentity(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	code, out, errOut := runCLI(t, "sync", "guestbook/guestbook", "--wait", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	want := "Namespace guestbook  Synced\nDeployment guestbook/web  Synced\nSucceeded as system:serviceaccount:guestbook:guestbook-deployer\n"
	if out != want {
		t.Errorf("output\n%s\nwant\n%s", out, want)
	}
	s.runner.mu.Lock()
	defer s.runner.mu.Unlock()
	if len(s.runner.reqs) != 1 || s.runner.reqs[0].InitiatedBy.Username != "alice" || !reflect.DeepEqual(s.runner.reqs[0].Sync, v1alpha1.SyncOperation{}) {
		t.Errorf("requests %+v", s.runner.reqs)
	}
}

func TestSyncPassesTheOperationParameters(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	t.Setenv(tokenEnv, syncAliceToken)
	code, out, errOut := runCLI(t, "sync", "guestbook/guestbook", "--wait", "--dry-run", "--prune", "--revision", "v1.2.3", "--server", s.url, "--cacert", s.caFile)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !strings.HasSuffix(out, "Succeeded (dry run) as system:serviceaccount:guestbook:guestbook-deployer\n") {
		t.Errorf("output does not end with the dry-run phase and identity:\n%s", out)
	}
	s.runner.mu.Lock()
	defer s.runner.mu.Unlock()
	if diff := cmp.Diff(v1alpha1.SyncOperation{Revision: "v1.2.3", Prune: true, DryRun: true}, s.runner.reqs[0].Sync); diff != "" {
		t.Errorf("operation (-want +got):\n%s", diff)
	}
}

func TestSyncJSONPrintsTheFinalState(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	code, out, errOut := runCLI(t, "sync", "guestbook/guestbook", "--wait", "-o", "json", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	var st v1alpha1.OperationState
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("-o json printed more than one JSON object: %v\n%s", err, out)
	}
	if st.Phase != v1alpha1.OperationSucceeded || st.SyncResult == nil || len(st.SyncResult.Resources) != 2 || st.Operation.InitiatedBy.Username != "alice" {
		t.Errorf("state %+v", st)
	}

	// Without --wait, -o json prints the Running state of the 202.
	code, out, _ = runCLI(t, "sync", "guestbook/broken", "-o", "json", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	st = v1alpha1.OperationState{}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || st.Phase != v1alpha1.OperationRunning {
		t.Errorf("without --wait: exit %d, %v, %s", code, err, out)
	}
}

func TestSyncExitsOneWhenTheSyncFails(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	code, out, _ := runCLI(t, "sync", "guestbook/broken", "--wait", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	want := "preflight: system:serviceaccount:guestbook:guestbook-deployer lacks 1 permission:\n  create deployments.apps in guestbook\nFailed as system:serviceaccount:guestbook:guestbook-deployer\n"
	if out != want {
		t.Errorf("output\n%s\nwant\n%s", out, want)
	}
}

func TestSyncWithoutWaitReturnsAtOnce(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	code, out, errOut := runCLI(t, "sync", "guestbook/guestbook", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 0 || out != "sync of guestbook/guestbook started (Running)\n" {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
}

func TestSyncReportsRefusals(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want []string
	}{
		{"a caller without rights gets deputy's 403 message", []string{"--token-file", writeToken(t, syncBobToken)}, "",
			[]string{`error: applications.deputy.dev "guestbook" is forbidden: User "bob" cannot create resource "applications/sync" in API group "deputy.dev" in the namespace "guestbook"`,
				"grant verb create on applications/sync"}},
		{"an unknown token gets 401 and how to authenticate", nil, "nobody-knows-this",
			[]string{"error: Unauthorized", "the bearer token was not accepted", "--token-file"}},
		{"no credentials at all get 401", nil, "",
			[]string{"error: Unauthorized", "no credentials were sent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(t.TempDir()) // no development certificates here
			t.Setenv(tokenEnv, tc.env)
			args := append([]string{"sync", "guestbook/guestbook", "--wait", "--server", s.url, "--cacert", s.caFile}, tc.args...)
			code, out, errOut := runCLI(t, args...)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s%s", w, out, errOut)
				}
			}
			if strings.Contains(errOut, syncBobToken) || strings.Contains(errOut, "nobody-knows-this") {
				t.Errorf("a token was printed:\n%s", errOut)
			}
		})
	}
	code, _, errOut := runCLI(t, "sync", "guestbook/nope", "--server", s.url, "--cacert", s.caFile, "--token-file", writeToken(t, syncAliceToken))
	if code != 1 || !strings.Contains(errOut, `applications.deputy.dev "nope" not found`) {
		t.Errorf("unknown Application: exit %d, %s", code, errOut)
	}
}

func TestSyncRejectsBadArguments(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a name without namespace", []string{"sync", "guestbook"}, "NAMESPACE/NAME"},
		{"an invalid namespace", []string{"sync", "Guest_book/x"}, `namespace "Guest_book"`},
		{"an unknown output format", []string{"sync", "a/b", "-o", "yaml"}, "the only format is json"},
		{"a token file and a client certificate", []string{"sync", "a/b", "--token-file", "t", "--client-cert", "c", "--client-key", "k"}, "not both"},
		{"a client certificate without key", []string{"sync", "a/b", "--client-cert", "c"}, "go together"},
		{"a server that is not a URL", []string{"sync", "a/b", "--server", "127.0.0.1:8443", "--token-file", "/dev/null"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, tc.args...)
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q, want 1 and %q", code, errOut, tc.want)
			}
		})
	}
}

// TestSyncDefaultsToTheDevelopmentSetup: with no flags but --server (the
// port is random here), deputy sync uses .deputy/certs/ca.crt and the
// kube-apiserver client certificate, as generated by deputy serve.
func TestSyncDefaultsToTheDevelopmentSetup(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv(tokenEnv, "")
	certDir := filepath.Join(".deputy", "certs")
	if _, err := certs.Init(certDir, certs.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	serving, err := tls.LoadX509KeyPair(filepath.Join(certDir, certs.ServingCertFile), filepath.Join(certDir, certs.ServingKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(certDir, certs.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	s := startSyncServer(t, &serving, pool)
	code, out, errOut := runCLI(t, "sync", "guestbook/guestbook", "--wait", "--server", s.url)
	if code != 0 || !strings.HasSuffix(out, "Succeeded as system:serviceaccount:guestbook:guestbook-deployer\n") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	s.runner.mu.Lock()
	defer s.runner.mu.Unlock()
	if got := s.runner.reqs[0].InitiatedBy.Username; got != certs.ClientCommonName {
		t.Errorf("initiated by %q, want the development client certificate's %q", got, certs.ClientCommonName)
	}
}

func TestServeSyncFlags(t *testing.T) {
	c, out, err := captureServe(t, "serve", "--sync-impersonation-enabled", "--sync-impersonation-enforced=false", "--sync-cache-dir", "/var/cache/deputy", "--sync-parallelism", "3",
		"--sync-health-timeout", "2m")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !c.Sync.Impersonation.Enabled || c.Sync.Impersonation.IsEnforced() || c.Sync.CacheDir != "/var/cache/deputy" || c.Sync.Parallelism != 3 ||
		c.Sync.HealthTimeout.Duration != 2*time.Minute {
		t.Errorf("sync %+v", c.Sync)
	}
	c, _, err = captureServe(t, "serve")
	if err != nil {
		t.Fatal(err)
	}
	if c.Sync.Impersonation.Enabled || !c.Sync.Impersonation.IsEnforced() || c.Sync.CacheDir != ".deputy/repos" || c.Sync.Parallelism != 8 {
		t.Errorf("default sync %+v", c.Sync)
	}
	if _, _, err := captureServe(t, "serve", "--sync-parallelism", "-2"); err == nil || !strings.Contains(err.Error(), "sync.parallelism:") {
		t.Errorf("err = %v, want sync.parallelism rejected", err)
	}
}

func TestValidateCountsApplicationsAndWarnsAboutMissingProjects(t *testing.T) {
	dir := t.TempDir()
	app := "apiVersion: deputy.dev/v1alpha1\nkind: Application\nmetadata: {name: web, namespace: team-a}\nspec: {project: web, source: {repoURL: https://example.test/web.git}, destination: {name: in-cluster}}\n"
	if err := os.WriteFile(filepath.Join(dir, "apps.yaml"), []byte(app), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "validate", "--policy", dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, w := range []string{"1 Applications", `warning: ` + filepath.Join(dir, "apps.yaml") + ` document 1 Application team-a/web: Application "team-a/web" references AppProject "web", which does not exist in the project namespaces`} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// A serving certificate the client cannot verify is not a bare x509 error:
// the message names --cacert and where deputy's CA is.
func TestSyncNamesCacertWhenTheServingCertificateDoesNotVerify(t *testing.T) {
	s := startSyncServer(t, nil, nil)
	otherCA := t.TempDir()
	if _, err := certs.Init(otherCA, certs.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	token := writeToken(t, syncAliceToken)
	localhost := strings.Replace(s.url, "127.0.0.1", "localhost", 1) // httptest's certificate names 127.0.0.1, not localhost
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{
			name: "no --cacert and no development CA here: the system roots do not know deputy's CA",
			args: []string{"--server", s.url},
			want: []string{"failed to reach deputy at " + s.url + ": its serving certificate does not verify with the system's trusted CAs: x509: certificate signed by unknown authority",
				"no --cacert was given and .deputy/certs/ca.crt does not exist here: pass deputy's CA with --cacert FILE",
				"deputy serve's development certificates: .deputy/certs/ca.crt under the directory deputy serve runs in",
				"kubectl -n deputy-system get secret deputy-serving-cert"},
		},
		{
			name: "--cacert names another CA",
			args: []string{"--server", s.url, "--cacert", filepath.Join(otherCA, certs.CACertFile)},
			want: []string{"does not verify with the CA in " + filepath.Join(otherCA, certs.CACertFile),
				"--cacert " + filepath.Join(otherCA, certs.CACertFile) + " is not the CA that signed it: pass deputy's CA with --cacert FILE"},
		},
		{
			name: "the certificate does not name the host",
			args: []string{"--server", localhost, "--cacert", s.caFile},
			want: []string{"x509: certificate is valid for", "not localhost", "use --server with a host it names"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"sync", "guestbook/guestbook", "--token-file", token}, tc.args...)...)
			if code == 0 {
				t.Fatalf("exit 0\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

// TestSyncNamesTheDevelopmentCertificateOn403: with no credential, deputy
// sync falls back to the development client certificate, whose identity is
// kube-apiserver's; a 403 then says so and names a credential to use,
// instead of asking for a policy grant for kube-apiserver.
func TestSyncNamesTheDevelopmentCertificateOn403(t *testing.T) {
	forbidden := &apiclient.StatusError{Status: metav1.Status{Code: http.StatusForbidden,
		Message: `applications.deputy.dev "guestbook" is forbidden: User "kube-apiserver" cannot create resource "applications/sync"`}}
	dev := apiclient.Options{CertFile: filepath.Join(config.DefaultCertDir, certs.ClientCertFile)}
	if got := explainAPIError(forbidden, dev, syncCall).Error(); !strings.Contains(got, "development client certificate") || !strings.Contains(got, tokenEnv+"=deputy-demo-alice") {
		t.Errorf("with the development certificate: %s", got)
	}
	own := apiclient.Options{CertFile: "/etc/me/client.crt"}
	if got := explainAPIError(forbidden, own, syncCall).Error(); strings.Contains(got, "development client certificate") || !strings.Contains(got, "grant verb create on applications/sync") {
		t.Errorf("with an explicit certificate: %s", got)
	}
}

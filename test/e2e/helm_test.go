package e2e

import (
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	helmregistry "helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/repo"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/syncer/cluster"
	"deputy.dev/deputy/syncer/source"
)

// Charts: from Git, from a Helm repository served by the test over HTTPS
// with basic auth, and from an OCI registry run in the test, each synced by
// the in-process engine as the derived ServiceAccount (preflight, apply,
// prune), rendered in render workers that trust the test's certificate
// through SSL_CERT_FILE (as an operator's private CA).

const (
	chartUser     = "charts"
	chartPassword = "chart-s3cret"
)

// chartRepo is a Helm repository over TLS with basic auth; it records each
// request's path and Authorization header.
type chartRepo struct {
	t     *testing.T
	srv   *httptest.Server
	dir   string
	mu    sync.Mutex
	files map[string][]byte
	index *repo.IndexFile
	seen  []string
}

func newChartRepo(t *testing.T) *chartRepo {
	r := &chartRepo{t: t, dir: t.TempDir(), files: map[string][]byte{}, index: repo.NewIndexFile()}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, req.URL.Path+" "+req.Header.Get("Authorization"))
		data, ok := r.files[req.URL.Path]
		r.mu.Unlock()
		if u, p, basic := req.BasicAuth(); !basic || u != chartUser || p != chartPassword {
			w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if !ok {
			http.NotFound(w, req)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// add packages ch (helm package's archive) and lists it in index.yaml at
// url (the archive's own path on this server when "").
func (r *chartRepo) add(ch *chart.Chart, url string) []byte {
	r.t.Helper()
	p, err := chartutil.Save(ch, r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	name := filepath.Base(p)
	r.files["/"+name] = data
	if err := r.index.MustAdd(ch.Metadata, name, r.srv.URL, sha256Hex(data)); err != nil {
		r.t.Fatal(err)
	}
	if url != "" {
		cvs := r.index.Entries[ch.Name()]
		cvs[len(cvs)-1].URLs = []string{url}
	}
	r.index.SortEntries()
	idx, err := yaml.Marshal(r.index)
	if err != nil {
		r.t.Fatal(err)
	}
	r.files["/index.yaml"] = idx
	return data
}

func (r *chartRepo) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// trustTestServers makes the render workers (children of this process)
// trust httptest's certificate: SSL_CERT_FILE, which Go reads for the
// system roots.
func trustTestServers(t *testing.T, srv *httptest.Server) {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", ca)
}

// chartEngine is newSyncEngine with the chart repositories' credential
// (files, as a mounted Secret) and limits.
func chartEngine(t *testing.T, credURLs []string, limits source.Limits) *syncer.Engine {
	t.Helper()
	dir := t.TempDir()
	user, pass := filepath.Join(dir, "user"), filepath.Join(dir, "pass")
	writeFile(t, user, chartUser+"\n")
	writeFile(t, pass, chartPassword+"\n")
	var creds []source.RepoCredential
	for _, u := range credURLs {
		creds = append(creds, source.RepoCredential{URL: u, UsernameFile: user, PasswordFile: pass})
	}
	logs := &logLines{}
	e, err := syncer.NewEngine(syncer.EngineOptions{
		Clusters:      cluster.NewRegistry(cluster.InCluster(controllerConfig(t))),
		Impersonation: enforced,
		Source:        source.Options{CacheDir: t.TempDir(), LocalRepositories: []string{repoRoot}, RepoCredentials: creds, Limits: limits},
		Logger:        logs.logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// twoConfigMaps is a chart of version v rendering ConfigMaps "<release>-a"
// and, while .Values.b is true (the default) and v is 1.0.0, "<release>-b".
func twoConfigMaps(v string) *chart.Chart {
	tmpl := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}-a}\ndata: {version: {{ .Chart.Version | quote }}}\n"
	if v == "1.0.0" {
		tmpl += "{{ if .Values.b }}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}-b}\n{{ end }}\n"
	}
	return &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "pair", Version: v},
		Raw: []*chart.File{{Name: "values.yaml", Data: []byte("b: true\n")}}, Templates: []*chart.File{{Name: "templates/cms.yaml", Data: []byte(tmpl)}}}
}

// chartSyncSetup makes a namespace with a derived ServiceAccount allowed
// to manage ConfigMaps there, and its project (sourceRepos as given).
func chartSyncSetup(t *testing.T, ns string, sourceRepos []string) *v1alpha1.AppProject {
	t.Helper()
	const sa = "chart-deployer"
	ensureNamespace(t, ns)
	serviceAccountToken(t, ns, sa)
	grantControllerServiceAccountReads(t)
	role(t, ns, "e2e-charts", ns, sa, rule("", []string{"configmaps"}, "get", "list", "create", "patch", "delete"))
	p := syncProject(t, ns, v1alpha1.AppProjectSpec{SourceRepos: sourceRepos, Destinations: dests(ns),
		DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{saEntry(ns, sa)}})
	waitForGate(t, "system:serviceaccount:"+ns+":"+sa)
	return p
}

// syncTwice syncs app, checks both ConfigMaps, lets change move the source
// (values or version), syncs with prune and checks that "<app>-b" was
// pruned as the ServiceAccount and "<app>-a" carries wantVersion.
func syncTwice(t *testing.T, e *syncer.Engine, app *v1alpha1.Application, project *v1alpha1.AppProject, change func(), wantRevision, wantVersion string) {
	t.Helper()
	ns := app.Spec.Destination.Namespace
	first := e.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
	if first.Phase != v1alpha1.OperationSucceeded {
		t.Fatal(describe(first))
	}
	if first.Identity != "system:serviceaccount:"+ns+":chart-deployer" {
		t.Errorf("synced as %q, want the derived ServiceAccount", first.Identity)
	}
	cs := admin(t)
	for _, n := range []string{app.Name + "-a", app.Name + "-b"} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), n, metav1.GetOptions{}); err != nil {
			t.Fatalf("after the first sync: %s: %v", n, err)
		}
	}
	change()
	app.Status.OperationState = first
	second := e.Run(t.Context(), syncer.Request{Application: app, Project: project, Sync: v1alpha1.SyncOperation{Prune: true}}, nil)
	if second.Phase != v1alpha1.OperationSucceeded {
		t.Fatal(describe(second))
	}
	if r := resultsByName(second)["ConfigMap/"+app.Name+"-b"]; r == nil || r.Status != v1alpha1.ResultCodePruned {
		t.Errorf("the second sync did not prune %s-b: %s", app.Name, describe(second))
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), app.Name+"-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s-b after prune: %v", app.Name, err)
	}
	var cm *corev1.ConfigMap
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), app.Name+"-a", metav1.GetOptions{})
	if err != nil || cm.Data["version"] != wantVersion {
		t.Errorf("%s-a: %v %v, want chart version %s", app.Name, cm, err, wantVersion)
	}
	if wantRevision != "" && (second.SyncResult == nil || second.SyncResult.Revision != wantRevision) {
		t.Errorf("revision %v, want %s", second.SyncResult, wantRevision)
	}
}

func TestSyncHelmChartFromARepository(t *testing.T) {
	const ns = "helm-repo"
	r := newChartRepo(t)
	trustTestServers(t, r.srv)
	r.add(twoConfigMaps("1.0.0"), "")
	r.add(twoConfigMaps("1.1.0"), "")
	project := chartSyncSetup(t, ns, []string{r.srv.URL})
	app := application("repo-pair", ns, r.srv.URL, "", ns)
	app.Spec.Source.Chart, app.Spec.Source.TargetRevision = "pair", "1.0.*"
	syncTwice(t, chartEngine(t, []string{r.srv.URL}, source.Limits{}), app, project, func() {
		app.Spec.Source.TargetRevision = "~1.1"
	}, "1.1.0", "1.1.0")
}

func TestSyncHelmChartFromAnOCIRegistry(t *testing.T) {
	const ns = "helm-oci"
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != chartUser || p != chartPassword {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, req)
	}))
	defer srv.Close()
	trustTestServers(t, srv)
	host := strings.TrimPrefix(srv.URL, "https://")
	push, err := helmregistry.NewClient(helmregistry.ClientOptHTTPClient(srv.Client()), helmregistry.ClientOptBasicAuth(chartUser, chartPassword), helmregistry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1.0.0", "1.1.0"} {
		p, err := chartutil.Save(twoConfigMaps(v), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := push.Push(data, host+"/charts/pair:"+v); err != nil {
			t.Fatal(err)
		}
	}
	repoURL := "oci://" + host + "/charts"
	project := chartSyncSetup(t, ns, []string{"oci://" + host + "/*"})
	app := application("oci-pair", ns, repoURL, "", ns)
	app.Spec.Source.Chart, app.Spec.Source.TargetRevision = "pair", "1.0.0"
	syncTwice(t, chartEngine(t, []string{repoURL}, source.Limits{}), app, project, func() {
		app.Spec.Source.TargetRevision = "1.1.0"
	}, "1.1.0", "1.1.0")
}

package source

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/repo"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/internal/manifest"
	"deputy.dev/deputy/policy/v1alpha1"
)

// chartServer is a Helm repository over TLS with basic auth (deputy /
// s3cret), serving charts packaged in the test.
type chartServer struct {
	t     testing.TB
	srv   *httptest.Server
	dir   string
	mu    sync.Mutex
	files map[string][]byte
	index *repo.IndexFile
	auths []string
	// open serves without basic auth.
	open bool
}

func newChartServer(t testing.TB) *chartServer {
	s := &chartServer{t: t, dir: t.TempDir(), files: map[string][]byte{}, index: repo.NewIndexFile()}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.mu.Lock()
		s.auths = append(s.auths, req.Header.Get("Authorization"))
		data, ok := s.files[req.URL.Path]
		s.mu.Unlock()
		if u, p, basic := req.BasicAuth(); !s.open && (!basic || u != "deputy" || p != "s3cret") {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if !ok {
			http.NotFound(w, req)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// add packages ch (helm package's archive, chartutil.Save), serves it and
// lists it in index.yaml; it returns the archive's path.
func (s *chartServer) add(ch *chart.Chart) string {
	s.t.Helper()
	p, err := chartutil.Save(ch, s.dir)
	if err != nil {
		s.t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := filepath.Base(p)
	s.files["/"+name] = data
	if err := s.index.MustAdd(ch.Metadata, name, s.srv.URL, digestHex(data)); err != nil {
		s.t.Fatal(err)
	}
	s.index.SortEntries()
	idx, err := yaml.Marshal(s.index)
	if err != nil {
		s.t.Fatal(err)
	}
	s.files["/index.yaml"] = idx
	return p
}

// chartCache is a Cache whose render workers trust the test servers'
// certificate (SSL_CERT_FILE, as an operator's private CA) and whose
// credential for the server is deputy / password.
func (s *chartServer) chartCache(password string) *Cache {
	s.t.Helper()
	dir := s.t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}), 0o600); err != nil {
		s.t.Fatal(err)
	}
	user, pass := filepath.Join(dir, "user"), filepath.Join(dir, "pass")
	_ = os.WriteFile(user, []byte("deputy\n"), 0o600)
	_ = os.WriteFile(pass, []byte(password+"\n"), 0o600)
	c := &Cache{dir: filepath.Join(dir, "cache"), local: []string{testTempRoot(s.t)},
		creds: []RepoCredential{{URL: s.srv.URL, UsernameFile: user, PasswordFile: pass}}}
	c.worker.env = []string{"SSL_CERT_FILE=" + ca}
	return c
}

func digestHex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func webChart(version string, deps ...*chart.Dependency) *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "web", Version: version, Dependencies: deps},
		// chartutil.Save writes values.yaml from Raw.
		Raw: []*chart.File{{Name: "values.yaml", Data: []byte("replicas: 1\nmessage: hello\n")}},
		Templates: []*chart.File{
			{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\n  namespace: {{ .Release.Namespace }}\ndata:\n  message: {{ .Values.message | quote }}\n  chart: {{ .Chart.Version | quote }}\n")},
			{Name: "templates/deploy.yaml", Data: []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: {{ .Release.Name }}}\nspec:\n  replicas: {{ .Values.replicas }}\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n")},
		},
		Files: []*chart.File{{Name: "values-prod.yaml", Data: []byte("replicas: 3\n")}},
	}
}

// A chart from a Helm repository renders in the render worker: the version
// range resolves to the newest match (Rendered.Revision, and
// ResolveRevision notices a new one), the credential is sent, the values
// files are the chart's, and the objects equal `helm template` of the
// same archive.
func TestRenderChartFromAHelmRepository(t *testing.T) {
	s := newChartServer(t)
	s.add(webChart("1.0.0"))
	archive := s.add(webChart("1.2.0"))
	s.add(webChart("2.0.0"))
	c := s.chartCache("s3cret")
	h := &v1alpha1.HelmSource{ReleaseName: "shop", Namespace: "prod", ValueFiles: []string{"values-prod.yaml"}, Parameters: []v1alpha1.HelmParameter{{Name: "message", Value: "hi"}}}
	src := v1alpha1.ApplicationSource{RepoURL: s.srv.URL, Chart: "web", TargetRevision: "1.*", Helm: h}
	got, err := c.Render(t.Context(), src, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != "1.2.0" {
		t.Errorf("Revision = %q, want the resolved chart version 1.2.0", got.Revision)
	}
	if diff := cmp.Diff([]string{"ConfigMap/shop-config", "Deployment/shop"}, names(got.Objects)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if r, _, _ := unstructured.NestedInt64(got.Objects[1].Object, "spec", "replicas"); r != 3 {
		t.Errorf("replicas = %d, want 3 from the chart's values-prod.yaml", r)
	}
	if s.auths[0] == "" {
		t.Errorf("the repository got no credential")
	}
	bin := os.Getenv("HELM_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "helm") // make test-binaries
	}
	if _, err := os.Stat(bin); err != nil {
		t.Logf("no helm binary at %s (make test-binaries, or HELM_BIN): the comparison with helm template is skipped", bin)
	} else {
		// values-prod.yaml's replicas: 3, then the parameter.
		out, err := exec.Command(bin, "template", "shop", archive, "--namespace", "prod", "--include-crds", "--set", "replicas=3", "--set", "message=hi").Output()
		if err != nil {
			t.Fatalf("helm template: %v", err)
		}
		want, err := manifest.Decode(out)
		if err != nil {
			t.Fatal(err)
		}
		var w, g []map[string]any
		for _, o := range want {
			w = append(w, o.Object)
		}
		for _, o := range got.Objects {
			g = append(g, o.Object)
		}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("deputy's render differs from helm template of %s (-helm +deputy):\n%s", archive, diff)
		}
	}

	s.add(webChart("1.3.0"))
	if rev, err := c.ResolveRevision(t.Context(), src); err != nil || rev != "1.3.0" {
		t.Errorf("ResolveRevision = %q, %v; want the new 1.3.0", rev, err)
	}
	if got, err := c.Render(t.Context(), src, "1.0.0"); err != nil || got.Revision != "1.0.0" {
		t.Errorf("an operation's revision 1.0.0 overrides targetRevision: %v, %v", got, err)
	}
}

// The worker's errors name the chart and the fix, and never repeat the
// password it was given on stdin.
func TestRenderChartErrors(t *testing.T) {
	s := newChartServer(t)
	s.add(webChart("1.0.0"))
	_, err := s.chartCache("wrong-password").Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: s.srv.URL, Chart: "web"}, "")
	if err == nil || strings.Contains(err.Error(), "wrong-password") || !strings.Contains(err.Error(), "401 Unauthorized: the repository refused the credential of sync.repositories entry "+s.srv.URL) {
		t.Fatalf("err = %v, want a 401 naming the credential's entry, not its password", err)
	}
	_, err = s.chartCache("s3cret").Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: s.srv.URL, Chart: "web", TargetRevision: "9.x"}, "")
	if err == nil || !strings.HasPrefix(err.Error(), "chart web 9.x from "+s.srv.URL+`: no version matches "9.x" (the newest are 1.0.0)`) {
		t.Fatalf("err = %v", err)
	}
}

// A chart in Git whose Chart.yaml names a remote dependency gets it from
// the repository only when the project's sourceRepos permit it (matched
// as the Application's repoURL is), and then without the credential.
func TestRenderGitChartRemoteDependency(t *testing.T) {
	s := newChartServer(t)
	s.add(webChart("1.0.0"))
	r := newTestRepo(t)
	r.write("app/Chart.yaml", "apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n- name: web\n  version: ~1.0.0\n  repository: "+s.srv.URL+"\n")
	r.write("app/templates/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: own}\n")
	r.commit("chart with a remote dependency")
	src := v1alpha1.ApplicationSource{RepoURL: r.dir, Path: "app", Helm: &v1alpha1.HelmSource{ReleaseName: "a", Namespace: "n"}}

	_, err := s.chartCache("s3cret").Render(t.Context(), src, "", WithProject("team-a", []string{r.dir}))
	if err == nil || !strings.Contains(err.Error(), `Chart.yaml dependency web (repository "`+s.srv.URL+`"): the repository is not permitted in project 'team-a'`) {
		t.Fatalf("err = %v, want the dependency's repository refused by the project", err)
	}
	// The dependency is fetched anonymously: this server wants a password,
	// so a permitted dependency fails with a 401, not with deputy's
	// credential for the server.
	_, err = s.chartCache("s3cret").Render(t.Context(), src, "", WithProject("team-a", []string{r.dir, s.srv.URL}))
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") {
		t.Fatalf("err = %v, want the anonymous fetch refused", err)
	}
	for _, a := range s.auths {
		if a != "" {
			t.Errorf("a dependency fetch sent a credential: %q", a)
		}
	}
	s.open = true
	got, err := s.chartCache("s3cret").Render(t.Context(), src, "", WithProject("team-a", []string{r.dir, s.srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ConfigMap/a-config", "ConfigMap/own", "Deployment/a"}, names(got.Objects)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
}

// A chart from a repository whose Chart.yaml names a dependency in a
// permitted repository gets it (newest version its range allows); a
// file:// dependency of a downloaded chart has nowhere to come from.
func TestRenderRepositoryChartDependencies(t *testing.T) {
	s := newChartServer(t)
	s.open = true
	s.add(webChart("1.0.0"))
	s.add(webChart("1.0.3"))
	s.add(&chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "shop", Version: "2.0.0",
		Dependencies: []*chart.Dependency{{Name: "web", Version: "~1.0.0", Repository: s.srv.URL}}},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shop}\n")}}})
	s.add(&chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "local", Version: "1.0.0",
		Dependencies: []*chart.Dependency{{Name: "web", Version: "1.0.0", Repository: "file://../web"}}}})
	c := s.chartCache("s3cret")
	h := &v1alpha1.HelmSource{ReleaseName: "r", Namespace: "n"}
	got, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: s.srv.URL, Chart: "shop", Helm: h}, "", WithProject("team-a", []string{s.srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ConfigMap/r-config", "ConfigMap/shop", "Deployment/r"}, names(got.Objects)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if v := got.Objects[0].Object["data"].(map[string]any)["chart"]; v != "1.0.3" {
		t.Errorf("the dependency's version is %v, want 1.0.3, the newest ~1.0.0 allows", v)
	}
	_, err = c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: s.srv.URL, Chart: "local", Helm: h}, "", WithProject("team-a", []string{s.srv.URL}))
	if err == nil || !strings.Contains(err.Error(), `chart local 1.0.0 from `+s.srv.URL+`: Chart.yaml dependency web (repository "file://../web"): a file:// dependency of a chart downloaded from a repository has no directory to come from`) {
		t.Fatalf("err = %v", err)
	}
}

// A chart from a Helm repository reads $values/... from a Git repository
// (Argo CD's multi-source use: a public chart, the team's values in Git),
// at the ref's commit and within the same limits; $values/.. is refused.
func TestRenderRepositoryChartWithRefValues(t *testing.T) {
	s := newChartServer(t)
	s.add(webChart("1.0.0"))
	values := newTestRepo(t)
	values.write("web/prod.yaml", "replicas: 7\nmessage: from-git\n")
	values.write("web/big.yaml", "message: "+strings.Repeat("x", 4096)+"\n")
	commit := values.commit("values")
	c := s.chartCache("s3cret")
	c.local = []string{testTempRoot(t)}
	ref := WithRefs(Ref{Name: "values", RepoURL: values.dir, Revision: commit.String()})
	src := v1alpha1.ApplicationSource{RepoURL: s.srv.URL, Chart: "web", TargetRevision: "1.0.0",
		Helm: &v1alpha1.HelmSource{ReleaseName: "shop", Namespace: "prod", ValueFiles: []string{"$values/web/prod.yaml"}}}
	got, err := c.Render(t.Context(), src, "", ref)
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(got.Objects[1].Object, "spec", "replicas"); r != 7 || got.Revision != "1.0.0" {
		t.Errorf("replicas = %d (want 7 from the values repository), revision %q", r, got.Revision)
	}
	if m, _, _ := unstructured.NestedString(got.Objects[0].Object, "data", "message"); m != "from-git" {
		t.Errorf("message = %q, want from-git", m)
	}
	src.Helm.ValueFiles = []string{"$values/../../etc/passwd"}
	if _, err := c.Render(t.Context(), src, "", ref); err == nil || !strings.Contains(err.Error(), "must stay inside that source's repository") {
		t.Errorf("$values/.. = %v, want it refused", err)
	}
	c.limits = Limits{MaxFileBytes: 1024}
	src.Helm.ValueFiles = []string{"$values/web/big.yaml"}
	if _, err := c.Render(t.Context(), src, "", ref); err == nil || !strings.Contains(err.Error(), FieldMaxFileBytes) || !strings.Contains(err.Error(), "big.yaml") {
		t.Errorf("a ref's file over maxFileBytes = %v, want a limit error", err)
	}
}

// BenchmarkRenderRepositoryChart renders a chart from a Helm repository
// over TLS with basic auth, as a sync does: the render worker reads
// index.yaml, finds the archive in the digest cache (the first iteration
// downloads it), verifies it and renders (docs/benchmarks.md).
func BenchmarkRenderRepositoryChart(b *testing.B) {
	s := newChartServer(b)
	for _, v := range []string{"1.0.0", "1.1.0", "1.2.0"} {
		s.add(webChart(v))
	}
	c := s.chartCache("s3cret")
	src := v1alpha1.ApplicationSource{RepoURL: s.srv.URL, Chart: "web", TargetRevision: "1.*", Helm: &v1alpha1.HelmSource{ReleaseName: "shop", Namespace: "prod"}}
	for b.Loop() {
		got, err := c.Render(b.Context(), src, "")
		if err != nil || got.Revision != "1.2.0" {
			b.Fatalf("%v %v", got, err)
		}
	}
}

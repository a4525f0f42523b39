package chartrepo

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/repo"
	"sigs.k8s.io/yaml"
)

// testChart packages a chart with one ConfigMap template (Helm's
// chartutil.Save: the archive helm package writes).
func testChart(t testing.TB, name, version string, deps ...*chart.Dependency) []byte {
	t.Helper()
	ch := &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version, Dependencies: deps},
		Raw:       []*chart.File{{Name: "values.yaml", Data: []byte("greeting: hello\n")}},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "-{{ .Release.Name }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  version: " + version + "\n")}},
	}
	dir := t.TempDir()
	p, err := chartutil.Save(ch, dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// rawArchive is a gzipped tar of entries (name → content; a nil content
// with a size makes a header that declares size bytes of zeros).
func rawArchive(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		size := int64(len(e.data))
		if e.zeros > 0 {
			size = e.zeros
		}
		hd := &tar.Header{Name: e.name, Mode: 0o644, Size: size, Typeflag: cmp.Or(e.typ, tar.TypeReg), Linkname: e.link}
		if e.typ == tar.TypeSymlink || e.typ == tar.TypeLink {
			hd.Size = 0
		}
		if err := tw.WriteHeader(hd); err != nil {
			t.Fatal(err)
		}
		if hd.Size == 0 {
			continue
		}
		if e.zeros > 0 {
			zero := make([]byte, 1<<20)
			for left := e.zeros; left > 0; left -= int64(len(zero)) {
				if _, err := tw.Write(zero[:min(left, int64(len(zero)))]); err != nil {
					t.Fatal(err)
				}
			}
		} else if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type tarEntry struct {
	name  string
	data  []byte
	zeros int64
	// typ is the entry's type (tar.TypeReg when 0); link a link's target.
	typ  byte
	link string
}

func sha(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// helmRepo is a Helm repository served by the test over TLS (index.yaml
// and archives), with basic auth when user is set. It records the
// Authorization headers it received.
type helmRepo struct {
	t        testing.TB
	srv      *httptest.Server
	user     string
	password string

	mu       sync.Mutex
	files    map[string][]byte
	index    *repo.IndexFile
	auths    []string
	requests []string
}

func newHelmRepo(t testing.TB, user, password string) *helmRepo {
	r := &helmRepo{t: t, user: user, password: password, files: map[string][]byte{}, index: repo.NewIndexFile()}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *helmRepo) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.auths = append(r.auths, req.Header.Get("Authorization"))
	r.requests = append(r.requests, req.URL.Path)
	data, ok := r.files[req.URL.Path]
	r.mu.Unlock()
	if r.user != "" {
		u, p, ok := req.BasicAuth()
		if !ok || u != r.user || p != r.password {
			w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
	}
	if !ok {
		http.NotFound(w, req)
		return
	}
	_, _ = w.Write(data)
}

// add serves archive as /charts/NAME-VERSION.tgz (or at url, when set) and
// lists it in index.yaml with digest (the archive's sha256 when "").
func (r *helmRepo) add(archive []byte, name, version, url, digest string) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	file := "charts/" + name + "-" + version + ".tgz"
	if url == "" {
		url = file
		r.files["/"+file] = archive
	}
	if digest == "" {
		digest = sha(archive)
	}
	if err := r.index.MustAdd(&chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version}, "x.tgz", "", digest); err != nil {
		r.t.Fatal(err)
	}
	cvs := r.index.Entries[name]
	cvs[len(cvs)-1].URLs = []string{url}
	r.index.SortEntries()
	data, err := yaml.Marshal(r.index)
	if err != nil {
		r.t.Fatal(err)
	}
	r.files["/index.yaml"] = data
}

// setFile serves data at path.
func (r *helmRepo) setFile(path string, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.files[path] = data
}

// seen returns the Authorization headers received, and clears them.
func (r *helmRepo) seen() (auths, paths []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	auths, paths, r.auths, r.requests = r.auths, r.requests, nil, nil
	return auths, paths
}

// testFetcher fetches with the test servers' CA trusted and small limits.
func testFetcher(t testing.TB, cred *Credential, servers ...*httptest.Server) *Fetcher {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = servers[0].Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	return &Fetcher{CacheDir: filepath.Join(t.TempDir(), "charts"), Credential: cred, Transport: tr,
		Limits: Limits{MaxFetchBytes: 1 << 20, MaxFileBytes: 256 << 10, MaxRenderBytes: 1 << 20, MaxFiles: 100}}
}

func hasAuth(auths []string) bool {
	for _, a := range auths {
		if a != "" {
			return true
		}
	}
	return false
}

func contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

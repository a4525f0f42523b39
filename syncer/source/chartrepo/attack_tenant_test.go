package chartrepo

import (
	"archive/tar"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/repo"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/syncer/source/limit"
)

// indexAt serves at dir/index.yaml an index that lists chart name 1.0.0
// at url with archive's digest.
func (r *helmRepo) indexAt(dir string, archive []byte, name, url string) {
	r.t.Helper()
	idx := repo.NewIndexFile()
	if err := idx.MustAdd(&chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: "1.0.0"}, "x.tgz", "", sha(archive)); err != nil {
		r.t.Fatal(err)
	}
	idx.Entries[name][0].URLs = []string{url}
	data, err := yaml.Marshal(idx)
	if err != nil {
		r.t.Fatal(err)
	}
	r.setFile(dir+"/index.yaml", data)
}

// A credential configured for a whole host (https://charts.example) is
// matched for a tenant's repository https://charts.example/team-a; the
// tenant writes that repository's index.yaml. A chart URL of that index,
// or a redirect, to another path of the same host (another tenant's
// repository, or a path served by someone else) must not get the
// credential: the credential goes to the repository the project
// permitted, not to the host.
func TestCredentialsStayInTheRepositorysPath(t *testing.T) {
	secret := testChart(t, "app", "1.0.0")
	for _, tc := range []struct{ name, url string }{
		{"an absolute URL on the same origin", "/team-b/app-1.0.0.tgz"},
		{"a relative URL with ..", "../team-b/app-1.0.0.tgz"},
		{"an encoded dot segment", "%2e%2e/team-b/app-1.0.0.tgz"},
		{"a redirect on the same origin", "charts/moved.tgz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newHelmRepo(t, "", "")
			url := tc.url
			if strings.HasPrefix(url, "/") {
				url = r.srv.URL + url
			}
			r.indexAt("/team-a", secret, "app", url)
			r.setFile("/team-b/app-1.0.0.tgz", secret)
			r.setFile("/team-a/%2e%2e/team-b/app-1.0.0.tgz", secret)
			mux := http.NewServeMux()
			mux.HandleFunc("/team-a/charts/moved.tgz", func(w http.ResponseWriter, req *http.Request) {
				http.Redirect(w, req, "/team-b/app-1.0.0.tgz", http.StatusFound)
			})
			mux.Handle("/", http.HandlerFunc(r.serve))
			r.srv.Config.Handler = mux
			f := testFetcher(t, &Credential{Username: "deputy", Password: "s3cret", ConfigURL: r.srv.URL}, r.srv)
			_, _ = f.Fetch(t.Context(), Source{RepoURL: r.srv.URL + "/team-a", Chart: "app", Version: "1.0.0"})
			auths, paths := r.seen()
			sawIndex := false
			for i, p := range paths {
				switch {
				case p == "/team-a/index.yaml":
					sawIndex = true
					if auths[i] == "" {
						t.Errorf("the repository's own index.yaml got no credential")
					}
				case !strings.HasPrefix(p, "/team-a/") || strings.Contains(p, ".."):
					if auths[i] != "" {
						t.Errorf("%s outside the repository's path got the credential", p)
					}
				}
			}
			if !sawIndex {
				t.Fatalf("index.yaml was not read: %q", paths)
			}
		})
	}
}

// The chart cache is shared by every render. A tenant who knows the digest
// of another tenant's private chart (a digest is no secret: it is in
// index.yaml, in an OCI manifest, in logs) announces it in its own
// index.yaml, with a chart URL that serves nothing: deputy must not hand it
// the archive that the private repository's credential downloaded.
func TestACachedChartIsNotSharedWithAnotherRepository(t *testing.T) {
	secret := testChart(t, "app", "1.0.0")
	private := newHelmRepo(t, "deputy", "s3cret")
	private.add(secret, "app", "1.0.0", "", "")
	f := testFetcher(t, &Credential{Username: "deputy", Password: "s3cret", ConfigURL: private.srv.URL}, private.srv)
	if _, err := f.Fetch(t.Context(), Source{RepoURL: private.srv.URL, Chart: "app", Version: "1.0.0"}); err != nil {
		t.Fatal(err)
	}

	evil := newHelmRepo(t, "", "")
	evil.indexAt("", secret, "app", "charts/missing.tgz")
	attacker := testFetcher(t, nil, evil.srv)
	attacker.CacheDir = f.CacheDir
	ch, err := attacker.Fetch(t.Context(), Source{RepoURL: evil.srv.URL, Chart: "app", Version: "1.0.0"})
	if err == nil {
		t.Fatalf("another repository announcing the private chart's digest got it from the cache (%d files)", len(ch.Files))
	}
	if !strings.Contains(err.Error(), "404") {
		t.Errorf("err = %v, want the missing archive reported", err)
	}
	// The private repository itself still reads its cache.
	if _, err := f.Fetch(t.Context(), Source{RepoURL: private.srv.URL, Chart: "app", Version: "1.0.0"}); err != nil {
		t.Fatal(err)
	}
	if _, paths := private.seen(); strings.Count(strings.Join(paths, " "), ".tgz") != 1 {
		t.Errorf("the private repository's archive was downloaded again: %q", paths)
	}
}

// Each chart's archive is bounded by maxRenderBytes and maxFiles; a chart
// that names many remote dependencies, each just under the limits, must
// not multiply them: the chart and its dependencies are one render's
// input, and count together.
func TestDependenciesShareTheRenderLimits(t *testing.T) {
	dep := newHelmRepo(t, "", "")
	meta := []byte("apiVersion: v2\nname: lib\nversion: 0.1.0\n")
	// 600 KiB unpacked each (the limit is 1 MiB), in few bytes.
	dep.add(rawArchive(t, tarEntry{name: "lib/Chart.yaml", data: meta},
		tarEntry{name: "lib/a", zeros: 200 << 10}, tarEntry{name: "lib/b", zeros: 200 << 10}, tarEntry{name: "lib/c", zeros: 200 << 10}), "lib", "0.1.0", "", "")
	top := newHelmRepo(t, "", "")
	top.add(testChart(t, "app", "1.0.0"), "app", "1.0.0", "", "")
	f := testFetcher(t, nil, top.srv)
	f.Project = "team-a"
	f.Permitted = PermittedBy("team-a", []string{dep.srv.URL})
	if _, err := f.Fetch(t.Context(), Source{RepoURL: top.srv.URL, Chart: "app"}); err != nil {
		t.Fatal(err)
	}
	var err error
	fetched := 0
	for range 10 {
		if _, err = f.Dependency(t.Context(), "chart app 1.0.0", &chart.Dependency{Name: "lib", Version: "0.1.0", Repository: dep.srv.URL}); err != nil {
			break
		}
		fetched++
	}
	var le *limit.Error
	if !errors.As(err, &le) || le.Field != limit.FieldMaxRenderBytes || !contains(err.Error(), "Chart.yaml dependency lib", "the charts of this render unpacked") {
		t.Fatalf("after %d dependencies of 600 KiB: err = %v, want maxRenderBytes exceeded by the charts together, naming the dependency", fetched, err)
	}
	if fetched != 1 {
		t.Errorf("%d dependencies of 600 KiB fetched within 1 MiB", fetched)
	}
	t.Log(err)
}

// An index.yaml is parsed in the render worker, but a small one must not
// expand into a large one: YAML aliases nested nine deep (the "billion
// laughs") are refused by the YAML parser, cleanly and at once.
func TestAnIndexOfAliasesIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nx0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i < 10; i++ {
		p := i - 1
		b.WriteString("x" + strconv.Itoa(i) + ": &a" + strconv.Itoa(i) + " [" + strings.Repeat("*a"+strconv.Itoa(p)+",", 8) + "*a" + strconv.Itoa(p) + "]\n")
	}
	b.WriteString("entries: {}\n")
	r := newHelmRepo(t, "", "")
	r.setFile("/index.yaml", []byte(b.String()))
	start := time.Now()
	_, err := testFetcher(t, nil, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
	if err == nil || !contains(err.Error(), "the repository's index.yaml", "fix the repository") {
		t.Fatalf("err = %v, want the index refused", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("refusing the index took %s", d)
	}
	t.Log(err)
}

// A chart archive is unpacked in memory, never onto a disk: a symlink or a
// hard link to a local file gives an empty file, never the local file's
// content; an entry of another type that carries data (a "contiguous
// file", which tar readers read as a regular one) counts against the
// limits as a regular file does.
func TestArchiveEntriesOfOtherTypes(t *testing.T) {
	meta := tarEntry{name: "app/Chart.yaml", data: []byte("apiVersion: v2\nname: app\nversion: 1.0.0\n")}
	t.Run("links give no local file", func(t *testing.T) {
		r := newHelmRepo(t, "", "")
		r.add(rawArchive(t, meta,
			tarEntry{name: "app/templates/passwd.yaml", typ: tar.TypeSymlink, link: "/etc/passwd"},
			tarEntry{name: "app/files/hosts", typ: tar.TypeLink, link: "/etc/hosts"},
			tarEntry{name: "app/files/up", typ: tar.TypeSymlink, link: "../../../../etc/passwd"}), "app", "1.0.0", "", "")
		ch, err := testFetcher(t, nil, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range ch.Files {
			if strings.Contains(string(f.Data), "root:") || strings.Contains(string(f.Data), "localhost") {
				t.Errorf("%s holds a local file's content: %q", f.Name, f.Data)
			}
		}
	})
	t.Run("a contiguous file over maxFileBytes", func(t *testing.T) {
		r := newHelmRepo(t, "", "")
		r.add(rawArchive(t, meta, tarEntry{name: "app/templates/zeros.yaml", typ: tar.TypeCont, zeros: 16 << 20}), "app", "1.0.0", "", "")
		_, err := testFetcher(t, nil, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
		var le *limit.Error
		if !errors.As(err, &le) || le.Field != limit.FieldMaxFileBytes || !strings.Contains(err.Error(), `"app/templates/zeros.yaml"`) {
			t.Fatalf("err = %v, want %s naming the entry", err, limit.FieldMaxFileBytes)
		}
	})
}

// A repository that redirects its archive to a server asking for a
// credential gets an error that says the credential stays with the
// repository, not one blaming the credential.
func TestARedirectToAServerAskingForACredentialIsExplained(t *testing.T) {
	archive := testChart(t, "app", "1.0.0")
	foreign := newHelmRepo(t, "other", "password")
	foreign.setFile("/app-1.0.0.tgz", archive)
	r := newHelmRepo(t, "deputy", "s3cret")
	r.add(archive, "app", "1.0.0", "moved/app-1.0.0.tgz", "")
	mux := http.NewServeMux()
	mux.HandleFunc("/moved/", func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, foreign.srv.URL+"/app-1.0.0.tgz", http.StatusFound)
	})
	mux.Handle("/", http.HandlerFunc(r.serve))
	r.srv.Config.Handler = mux
	_, err := testFetcher(t, cred, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app", Version: "1.0.0"})
	host := strings.TrimPrefix(r.srv.URL, "https://")
	if err == nil || !contains(err.Error(), "chart app 1.0.0 from "+r.srv.URL, "401 Unauthorized from "+foreign.srv.URL+"/app-1.0.0.tgz: "+host+" redirected the request there") || strings.Contains(err.Error(), "refused the credential") {
		t.Fatalf("err = %v, want the redirect named", err)
	}
	if auths, _ := foreign.seen(); hasAuth(auths) {
		t.Errorf("the redirect target got a credential: %q", auths)
	}
}

// Plain http is spoken to loopback only, for a repository an Application
// names there. An https repository's index.yaml must not send the render
// worker to plain http on loopback (a sidecar's admin port, deputy's own
// endpoints) that no project permitted: a redirect may not leave https,
// and neither may a chart URL.
func TestAnHTTPSIndexCannotSendTheWorkerToPlainHTTP(t *testing.T) {
	var hits []string
	var mu sync.Mutex
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		hits = append(hits, req.URL.Path)
		mu.Unlock()
		http.NotFound(w, req)
	}))
	defer local.Close()
	archive := testChart(t, "app", "1.0.0")
	r := newHelmRepo(t, "", "")
	r.indexAt("", archive, "app", local.URL+"/config_dump")
	_, err := testFetcher(t, nil, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app", Version: "1.0.0"})
	if err == nil || !contains(err.Error(), "chart app 1.0.0 from "+r.srv.URL, "version 1.0.0", "the chart URL "+local.URL+"/config_dump leaves https") {
		t.Errorf("err = %v, want the chart URL refused", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hits) != 0 {
		t.Errorf("the loopback server was asked for %q", hits)
	}
}

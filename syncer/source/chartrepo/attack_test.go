package chartrepo

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"

	"deputy.dev/deputy/syncer/source/limit"
)

var cred = &Credential{Username: "deputy", Password: "s3cret", ConfigURL: "https://charts.example"}

// An index.yaml is the repository's to write: a chart URL on another host
// (or another port of the same host) gets no credential, and neither does
// a redirect there, while the repository's own host gets it.
func TestCredentialsGoOnlyToTheRepositorysOrigin(t *testing.T) {
	archive := testChart(t, "app", "1.0.0")
	foreign := newHelmRepo(t, "", "")
	foreign.setFile("/app-1.0.0.tgz", archive)

	t.Run("a chart URL in index.yaml on another origin gets no credential", func(t *testing.T) {
		r := newHelmRepo(t, "deputy", "s3cret")
		r.add(archive, "app", "1.0.0", foreign.srv.URL+"/app-1.0.0.tgz", "")
		f := testFetcher(t, cred, r.srv)
		if _, err := f.Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app", Version: "1.0.0"}); err != nil {
			t.Fatal(err)
		}
		if auths, _ := r.seen(); !hasAuth(auths) {
			t.Errorf("the repository got no credential for index.yaml: %q", auths)
		}
		if auths, paths := foreign.seen(); hasAuth(auths) || len(paths) != 1 {
			t.Errorf("the foreign host got %q for %q, want one request without a credential", auths, paths)
		}
	})
	t.Run("a redirect to another origin loses the credential", func(t *testing.T) {
		r := newHelmRepo(t, "deputy", "s3cret")
		r.add(archive, "app", "1.0.0", "moved/app-1.0.0.tgz", "")
		mux := http.NewServeMux()
		mux.HandleFunc("/moved/", func(w http.ResponseWriter, req *http.Request) {
			http.Redirect(w, req, foreign.srv.URL+"/app-1.0.0.tgz", http.StatusFound)
		})
		mux.Handle("/", http.HandlerFunc(r.serve))
		r.srv.Config.Handler = mux
		f := testFetcher(t, cred, r.srv)
		if _, err := f.Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app", Version: "1.0.0"}); err != nil {
			t.Fatal(err)
		}
		if auths, paths := foreign.seen(); hasAuth(auths) || len(paths) != 1 {
			t.Errorf("the redirect target got %q for %q, want one request without a credential", auths, paths)
		}
	})
	t.Run("a redirect from https to http is refused", func(t *testing.T) {
		r := newHelmRepo(t, "", "")
		r.add(archive, "app", "1.0.0", "moved/app-1.0.0.tgz", "")
		plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { t.Error("the plain http server was reached") }))
		defer plain.Close()
		mux := http.NewServeMux()
		mux.HandleFunc("/moved/", func(w http.ResponseWriter, req *http.Request) {
			http.Redirect(w, req, plain.URL+"/x.tgz", http.StatusFound)
		})
		mux.Handle("/", http.HandlerFunc(r.serve))
		r.srv.Config.Handler = mux
		_, err := testFetcher(t, cred, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
		if err == nil || !strings.Contains(err.Error(), "it leaves https") {
			t.Fatalf("err = %v, want the downgrade refused", err)
		}
	})
	t.Run("a chart URL over plain http to a host that is not loopback is refused before any request", func(t *testing.T) {
		r := newHelmRepo(t, "deputy", "s3cret")
		r.add(archive, "app", "1.0.0", "http://charts.example.com/app-1.0.0.tgz", "")
		_, err := testFetcher(t, cred, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
		if err == nil || !strings.Contains(err.Error(), "refusing plain http to charts.example.com") {
			t.Fatalf("err = %v, want plain http refused", err)
		}
	})
	t.Run("no error repeats the password", func(t *testing.T) {
		r := newHelmRepo(t, "deputy", "other")
		r.add(archive, "app", "1.0.0", "", "")
		_, err := testFetcher(t, cred, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "401 Unauthorized: the repository refused the credential of sync.repositories entry https://charts.example") {
			t.Fatalf("err = %v, want a 401 naming the credential's configuration and not its password", err)
		}
	})
}

// What a repository serves is bounded: index.yaml and the archive by
// maxFetchBytes, the unpacked chart by maxFileBytes and maxRenderBytes
// (read from the tar headers before Helm unpacks anything).
func TestHostileRepositoriesHitLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(r *helmRepo)
		field   string
		message string
	}{
		{"a huge index.yaml", func(r *helmRepo) {
			r.setFile("/index.yaml", []byte("apiVersion: v1\nentries: {}\n#"+strings.Repeat("x", 2<<20)))
		}, limit.FieldMaxFetchBytes, "the response of "},
		{"a huge archive", func(r *helmRepo) {
			big := rawArchive(t, tarEntry{name: "app/Chart.yaml", data: []byte("apiVersion: v2\nname: app\nversion: 1.0.0\n")}, tarEntry{name: "app/noise", data: randomBytes(2 << 20)})
			r.add(big, "app", "1.0.0", "", "")
		}, limit.FieldMaxFetchBytes, "app-1.0.0.tgz"},
		{"a decompression bomb (64 MiB of zeros in 64 KB)", func(r *helmRepo) {
			bomb := rawArchive(t, tarEntry{name: "app/Chart.yaml", data: []byte("apiVersion: v2\nname: app\nversion: 1.0.0\n")}, tarEntry{name: "app/templates/zeros.yaml", zeros: 64 << 20})
			r.add(bomb, "app", "1.0.0", "", "")
		}, limit.FieldMaxFileBytes, `the chart archive's file "app/templates/zeros.yaml" (64Mi unpacked)`},
		{"many files that add up", func(r *helmRepo) {
			var es []tarEntry
			es = append(es, tarEntry{name: "app/Chart.yaml", data: []byte("apiVersion: v2\nname: app\nversion: 1.0.0\n")})
			for i := range 8 {
				es = append(es, tarEntry{name: "app/f" + string(rune('a'+i)), zeros: 200 << 10})
			}
			r.add(rawArchive(t, es...), "app", "1.0.0", "", "")
		}, limit.FieldMaxRenderBytes, "the chart archive unpacked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newHelmRepo(t, "", "")
			tc.setup(r)
			_, err := testFetcher(t, nil, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
			var le *limit.Error
			if !errors.As(err, &le) || le.Field != tc.field || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("err = %v, want a limit error of %s mentioning %q", err, tc.field, tc.message)
			}
			t.Log(err)
		})
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// An archive is trusted only with the digest the repository announces:
// a mismatch renders nothing and caches nothing; a path leaving the chart
// is refused; a file planted in the cache is not used.
func TestArchivesAreVerified(t *testing.T) {
	good := testChart(t, "app", "1.0.0")
	t.Run("a digest mismatch is refused and not cached", func(t *testing.T) {
		r := newHelmRepo(t, "", "")
		r.add(good, "app", "1.0.0", "", strings.Repeat("ab", 32))
		f := testFetcher(t, nil, r.srv)
		_, err := f.Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
		if err == nil || !contains(err.Error(), "chart app (newest stable) from "+r.srv.URL+" (version 1.0.0)", "the archive's sha256 is "+sha(good)+" but the repository announces "+strings.Repeat("ab", 32)) {
			t.Fatalf("err = %v, want a digest mismatch naming the chart and both digests", err)
		}
		if entries, _ := os.ReadDir(f.CacheDir); len(entries) != 0 {
			t.Errorf("the cache holds %d files after a mismatch", len(entries))
		}
	})
	t.Run("an entry that leaves the chart's directory is refused", func(t *testing.T) {
		for _, name := range []string{"../evil.yaml", "app/../../evil.yaml", "/etc/evil.yaml", `app\..\..\evil.yaml`, "app/templates/../../../evil.yaml"} {
			r := newHelmRepo(t, "", "")
			r.add(rawArchive(t, tarEntry{name: "app/Chart.yaml", data: []byte("apiVersion: v2\nname: app\nversion: 1.0.0\n")}, tarEntry{name: name, data: []byte("x")}), "app", "1.0.0", "", "")
			_, err := testFetcher(t, nil, r.srv).Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
			if err == nil || !strings.Contains(err.Error(), "leaves the chart's directory") {
				t.Errorf("entry %q: err = %v, want it refused", name, err)
			}
		}
	})
	t.Run("a planted cache file is not trusted, and is replaced", func(t *testing.T) {
		r := newHelmRepo(t, "", "")
		r.add(good, "app", "1.0.0", "", "")
		f := testFetcher(t, nil, r.srv)
		evil := testChart(t, "app", "6.6.6")
		cached := cachePath(f.CacheDir, r.srv.URL, nil, sha(good))
		if err := os.MkdirAll(filepath.Dir(cached), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cached, evil, 0o600); err != nil {
			t.Fatal(err)
		}
		ch, err := f.Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(fileData(ch, "templates/cm.yaml")), "version: 1.0.0") {
			t.Errorf("the planted archive was used: %s", fileData(ch, "templates/cm.yaml"))
		}
		if data, _ := os.ReadFile(cached); sha(data) != sha(good) {
			t.Errorf("the cache still holds the planted archive")
		}
	})
}

func fileData(ch *Chart, name string) []byte {
	for _, f := range ch.Files {
		if f.Name == name {
			return f.Data
		}
	}
	return nil
}

// A dependency comes only from a repository the project permits, never
// with the chart's credential, and never from file:// or a repository
// name.
func TestDependenciesAreConfined(t *testing.T) {
	dep := newHelmRepo(t, "", "")
	dep.add(testChart(t, "lib", "0.1.0"), "lib", "0.1.0", "", "")
	f := testFetcher(t, cred, dep.srv)
	f.Project = "team-a"
	f.Permitted = PermittedBy("team-a", []string{"https://git.example.com/*"})
	for _, tc := range []struct {
		name, repo, want string
	}{
		{"a repository the project does not permit", dep.srv.URL, "is not permitted in project 'team-a': add it (or a glob matching it) to the AppProject's spec.sourceRepos"},
		{"file:// in a downloaded chart", "file://../lib", "a file:// dependency of a chart downloaded from a repository has no directory to come from"},
		{"a repository name", "@stable", "a repository name refers to Helm's local repository list"},
		{"an alias", "alias:stable", "a repository name refers to Helm's local repository list"},
		{"another scheme", "s3://bucket/charts", "only https:// Helm repositories and oci:// registries are fetched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.Dependency(t.Context(), "chart app 1.0.0", &chart.Dependency{Name: "lib", Version: "0.1.*", Repository: tc.repo})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `chart app 1.0.0: Chart.yaml dependency lib (repository "`+tc.repo+`")`) {
				t.Fatalf("err = %v, want it to name the dependency and say %q", err, tc.want)
			}
		})
	}
	if auths, paths := dep.seen(); len(paths) != 0 {
		t.Errorf("refused dependencies made requests: %q %q", paths, auths)
	}
	t.Run("a permitted repository is fetched without the chart's credential", func(t *testing.T) {
		f.Permitted = PermittedBy("team-a", []string{dep.srv.URL})
		files, err := f.Dependency(t.Context(), "chart app 1.0.0", &chart.Dependency{Name: "lib", Version: "0.1.*", Repository: dep.srv.URL})
		if err != nil || len(files) == 0 {
			t.Fatalf("files %d, err %v", len(files), err)
		}
		if auths, _ := dep.seen(); hasAuth(auths) {
			t.Errorf("the dependency's repository got a credential: %q", auths)
		}
	})
}

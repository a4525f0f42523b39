package chartrepo

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	helmregistry "helm.sh/helm/v3/pkg/registry"
)

// A Helm repository over TLS with basic auth: versions resolve as Helm
// resolves them (an exact version, a range, "" the newest stable one), a
// second fetch of the same version downloads only index.yaml, and the
// errors name the chart, the constraint, the repository and the fix.
func TestFetchFromAHelmRepository(t *testing.T) {
	r := newHelmRepo(t, "deputy", "s3cret")
	for _, v := range []string{"1.0.0", "1.2.0", "1.2.7", "2.0.0-rc.1", "1.10.1"} {
		r.add(testChart(t, "app", v), "app", v, "", "")
	}
	f := testFetcher(t, cred, r.srv)
	for _, tc := range []struct{ version, want string }{
		{"", "1.10.1"},
		{"1.2.0", "1.2.0"},
		{"1.2.*", "1.2.7"},
		{">=1.0 <1.5", "1.2.7"},
		{"^2.0.0-0", "2.0.0-rc.1"},
	} {
		t.Run("version "+tc.version+" resolves to "+tc.want, func(t *testing.T) {
			got, err := f.Resolve(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app", Version: tc.version})
			if err != nil || got != tc.want {
				t.Fatalf("Resolve = %q, %v; want %s", got, err, tc.want)
			}
		})
	}
	t.Run("a second fetch of a version downloads only index.yaml", func(t *testing.T) {
		r.seen()
		for i := range 2 {
			ch, err := f.Fetch(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app", Version: "1.2.*"})
			if err != nil || ch.Version != "1.2.7" || !strings.Contains(string(fileData(ch, "templates/cm.yaml")), "version: 1.2.7") {
				t.Fatalf("fetch %d: %+v, %v", i, ch, err)
			}
			_, paths := r.seen()
			want := []string{"/index.yaml", "/charts/app-1.2.7.tgz"}
			if i == 1 {
				want = want[:1]
			}
			if !slices.Equal(paths, want) {
				t.Errorf("fetch %d requested %q, want %q", i, paths, want)
			}
		}
	})
	for _, tc := range []struct {
		name string
		src  Source
		cred *Credential
		want string
	}{
		{"a chart the index lacks", Source{Chart: "nope"}, cred, "chart nope (newest stable) from {URL}: the repository's index has no chart nope: fix spec.source.chart (or spec.source.repoURL); the index has app"},
		{"no version matches", Source{Chart: "app", Version: "3.x"}, cred, `chart app 3.x from {URL}: no version matches "3.x" (the newest are 2.0.0-rc.1, 1.10.1, 1.2.7, 1.2.0, 1.0.0): fix spec.source.targetRevision`},
		{"a bad constraint", Source{Chart: "app", Version: "main"}, cred, `spec.source.targetRevision "main" of chart app is not a chart version or semver constraint`},
		{"no credential for a private repository", Source{Chart: "app"}, nil, "{URL}/index.yaml: 401 Unauthorized: no credential in deputy's sync.repositories covers {URL}: add one"},
		{"not a Helm repository", Source{Chart: "app", RepoURL: "/nothing"}, cred, "404 Not Found: the repository has no index.yaml: check that spec.source.repoURL is a Helm repository (an OCI registry is written oci://HOST/PATH)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.src.RepoURL = r.srv.URL + tc.src.RepoURL
			f := testFetcher(t, tc.cred, r.srv)
			_, err := f.Fetch(t.Context(), tc.src)
			want := strings.ReplaceAll(tc.want, "{URL}", r.srv.URL)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v\nwant it to contain %s", err, want)
			}
		})
	}
}

// An OCI registry run in the test (go-containerregistry's), behind basic
// auth over TLS, the charts pushed with Helm's registry client: oci://
// sources resolve tags as versions, the layer's digest is checked and
// cached, and the credential goes to the registry's host only.
func TestFetchFromAnOCIRegistry(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var mu = make(chan struct{}, 1)
	var auths []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu <- struct{}{}
		auths = append(auths, req.Method+" "+req.URL.Path+" "+req.Header.Get("Authorization"))
		<-mu
		if u, p, ok := req.BasicAuth(); !ok || u != "deputy" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, req)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	push, err := helmregistry.NewClient(helmregistry.ClientOptHTTPClient(srv.Client()), helmregistry.ClientOptBasicAuth("deputy", "s3cret"), helmregistry.ClientOptWriter(testWriter{t}))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0.1.0", "0.2.0", "0.3.0-beta.1"} {
		if _, err := push.Push(testChart(t, "app", v), host+"/charts/app:"+v); err != nil {
			t.Fatalf("push %s: %v", v, err)
		}
	}
	repoURL := "oci://" + host + "/charts"
	f := testFetcher(t, cred, srv)
	t.Run("the newest stable tag", func(t *testing.T) {
		ch, err := f.Fetch(t.Context(), Source{RepoURL: repoURL, Chart: "app"})
		if err != nil || ch.Version != "0.2.0" || !strings.Contains(string(fileData(ch, "templates/cm.yaml")), "version: 0.2.0") {
			t.Fatalf("%+v, %v", ch, err)
		}
	})
	t.Run("an exact version, then from the cache", func(t *testing.T) {
		for i := range 2 {
			mu <- struct{}{}
			auths = nil
			<-mu
			ch, err := f.Fetch(t.Context(), Source{RepoURL: repoURL, Chart: "app", Version: "0.1.0"})
			if err != nil || ch.Version != "0.1.0" {
				t.Fatalf("%+v, %v", ch, err)
			}
			blobs := 0
			for _, a := range auths {
				if strings.Contains(a, "/blobs/") {
					blobs++
				}
			}
			if want := []int{1, 0}[i]; blobs != want {
				t.Errorf("fetch %d read %d blobs, want %d: %q", i, blobs, want, auths)
			}
		}
	})
	t.Run("a range with no match lists the tags", func(t *testing.T) {
		_, err := f.Fetch(t.Context(), Source{RepoURL: repoURL, Chart: "app", Version: ">=1"})
		var nv *noVersion
		if !errors.As(err, &nv) || !strings.Contains(err.Error(), `no version matches ">=1" (the newest are 0.3.0-beta.1, 0.2.0, 0.1.0)`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a blob redirected to another origin gets no credential", func(t *testing.T) {
		var foreignAuth []string
		foreign := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			foreignAuth = append(foreignAuth, req.Header.Get("Authorization"))
			reg.ServeHTTP(w, req)
		}))
		defer foreign.Close()
		redirecting := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if u, p, ok := req.BasicAuth(); !ok || u != "deputy" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
				return
			}
			if strings.Contains(req.URL.Path, "/blobs/") {
				http.Redirect(w, req, foreign.URL+req.URL.Path, http.StatusTemporaryRedirect)
				return
			}
			reg.ServeHTTP(w, req)
		}))
		defer redirecting.Close()
		f := testFetcher(t, cred, redirecting)
		ch, err := f.Fetch(t.Context(), Source{RepoURL: "oci://" + strings.TrimPrefix(redirecting.URL, "https://") + "/charts", Chart: "app", Version: "0.2.0"})
		if err != nil || ch.Version != "0.2.0" {
			t.Fatalf("%+v, %v", ch, err)
		}
		if len(foreignAuth) != 1 || hasAuth(foreignAuth) {
			t.Errorf("the redirect target got %q, want one request without a credential", foreignAuth)
		}
	})
	t.Run("without the credential the registry's 401 names the fix", func(t *testing.T) {
		_, err := testFetcher(t, nil, srv).Fetch(t.Context(), Source{RepoURL: repoURL, Chart: "app", Version: "0.1.0"})
		if err == nil || !strings.Contains(err.Error(), "the registry asks for a username and password: no credential in deputy's sync.repositories covers "+repoURL) {
			t.Fatalf("err = %v", err)
		}
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// A repository whose certificate deputy does not trust fails naming how
// an operator trusts a private CA.
func TestUntrustedCertificateNamesTheFix(t *testing.T) {
	r := newHelmRepo(t, "", "")
	r.add(testChart(t, "app", "1.0.0"), "app", "1.0.0", "", "")
	f := testFetcher(t, nil, r.srv)
	f.Transport = http.DefaultTransport.(*http.Transport).Clone() // the system roots only
	_, err := f.Resolve(t.Context(), Source{RepoURL: r.srv.URL, Chart: "app", Version: "1.0.0"})
	if err == nil || !contains(err.Error(), "certificate", "SSL_CERT_FILE") {
		t.Fatalf("err = %v, want a certificate error naming SSL_CERT_FILE", err)
	}
}

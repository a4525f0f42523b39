package chartrepo

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	helmregistry "helm.sh/helm/v3/pkg/registry"
)

// The registry the credential is configured for redirects a manifest to
// a server the tenant controls, which answers 401 with its own challenge
// (Basic, or Bearer with a token realm of its own): deputy must not answer
// it with the registry's credential, neither there nor at the realm it
// names (oras-go refuses a challenge from another origin than the one
// asked, GHSA-vh4v-2xq2-g5cg). The fetch fails naming the chart.
func TestOCIChallengesFromElsewhereGetNoCredential(t *testing.T) {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var mu sync.Mutex
	var evilAuths []string
	var redirect atomic.Bool
	evil := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		evilAuths = append(evilAuths, req.URL.Path+" "+req.Header.Get("Authorization"))
		mu.Unlock()
		if req.URL.Path == "/token" {
			_, _ = io.WriteString(w, `{"token":"t"}`)
			return
		}
		if strings.Contains(req.URL.Path, "basic") {
			w.Header().Set("WWW-Authenticate", `Basic realm="evil"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="https://`+req.Host+`/token",service="evil"`)
		}
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
	}))
	defer evil.Close()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != "deputy" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		if redirect.Load() && strings.Contains(req.URL.Path, "/manifests/") {
			kind := "bearer"
			if strings.Contains(req.URL.Path, "/basic/") {
				kind = "basic"
			}
			http.Redirect(w, req, evil.URL+"/"+kind+req.URL.Path, http.StatusTemporaryRedirect)
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
	for _, repo := range []string{"bearer", "basic"} {
		if _, err := push.Push(testChart(t, "app", "0.1.0"), host+"/"+repo+"/app:0.1.0"); err != nil {
			t.Fatalf("push: %v", err)
		}
	}
	redirect.Store(true)
	for _, repo := range []string{"bearer", "basic"} {
		f := testFetcher(t, cred, srv)
		_, err := f.Fetch(t.Context(), Source{RepoURL: "oci://" + host + "/" + repo, Chart: "app", Version: "0.1.0"})
		if err == nil || !contains(err.Error(), "chart app 0.1.0 from oci://"+host+"/"+repo, "Unauthorized from "+evil.URL+"/"+repo+"/v2/", host+" redirected the request there, and deputy sends the repository's credential (and answers challenges) only to the repository itself") {
			t.Errorf("%s: err = %v, want the fetch to fail naming the chart, the redirect and the fix", repo, err)
		}
		t.Log(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(evilAuths) == 0 {
		t.Fatal("the redirect was not followed: the test tests nothing")
	}
	for _, a := range evilAuths {
		if !strings.HasSuffix(a, " ") {
			t.Errorf("the tenant's server got a credential: %q", a)
		}
	}
}

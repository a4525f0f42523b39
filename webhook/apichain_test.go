package webhook

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"deputy.dev/deputy/tokenreview"
)

const aggregatedSyncPath = "/apis/sync.deputy.dev/v1alpha1/namespaces/guestbook/applications/guestbook/sync"

// withFrontProxy trusts front-proxy headers from certificates of proxyCA
// named front-proxy-client.
func withFrontProxy(proxyCA *testCA) apiFixtureOption {
	return func(a *APIAuthenticationOptions, o *APIOptions) {
		rh := &APIRequestHeader{
			VerifyOptions:   newSwitchableVerifier(proxyCA.pool()).VerifyOptions,
			AllowedNames:    []string{"front-proxy-client"},
			UsernameHeaders: []string{"X-Remote-User"}, UIDHeaders: []string{"X-Remote-Uid"},
			GroupHeaders: []string{"X-Remote-Group"}, ExtraHeaderPrefixes: []string{"X-Remote-Extra-"},
		}
		a.RequestHeader, o.RequestHeader = rh, rh
	}
}

func headers(kv ...string) func(*http.Request) {
	return func(r *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			r.Header.Add(kv[i], kv[i+1])
		}
	}
}

func TestAPIFrontProxyHeaders(t *testing.T) {
	proxyCA := newTestCA(t, "front-proxy-ca")
	f := newAPIFixture(t, nil, withFrontProxy(proxyCA))
	var seen http.Header
	asAlice := headers("X-Remote-User", "alice", "X-Remote-Group", "deployers")

	t.Run("without the proxy's client certificate the headers are ignored: 401", func(t *testing.T) {
		if resp := f.do(t, http.MethodPost, syncPath, "", "", "", asAlice); resp.code != http.StatusUnauthorized {
			t.Errorf("code %d: %s", resp.code, resp.body)
		}
	})
	t.Run("a certificate of the client CA (not the proxy CA) does not make headers trusted", func(t *testing.T) {
		resp := f.do(t, http.MethodPost, syncPath, "", "", "", withClientCert(t, f.ca, "front-proxy-client", nil), asAlice)
		// The certificate authenticates its own subject, who may not sync.
		if resp.code != http.StatusForbidden || !strings.Contains(resp.body, `User \"front-proxy-client\"`) {
			t.Errorf("code %d: %s", resp.code, resp.body)
		}
	})
	t.Run("a proxy certificate with a name not allowed: 401", func(t *testing.T) {
		if resp := f.do(t, http.MethodPost, syncPath, "", "", "", withClientCert(t, proxyCA, "someone-else", nil), asAlice); resp.code != http.StatusUnauthorized {
			t.Errorf("code %d: %s", resp.code, resp.body)
		}
	})
	t.Run("through the proxy the header user is authenticated and authorized", func(t *testing.T) {
		resp := f.do(t, http.MethodPost, aggregatedSyncPath, "", "", "", withClientCert(t, proxyCA, "front-proxy-client", nil), asAlice,
			func(r *http.Request) { seen = r.Header })
		if resp.code != http.StatusAccepted {
			t.Fatalf("code %d: %s", resp.code, resp.body)
		}
		if seen.Get("X-Remote-User") != "" || seen.Get("X-Remote-Group") != "" {
			t.Errorf("front-proxy headers survived authentication: %v", seen)
		}
		f.release()
	})
	t.Run("through the proxy a user without the permission: 403 naming deputy.dev", func(t *testing.T) {
		resp := f.do(t, http.MethodPost, aggregatedSyncPath, "", "", "", withClientCert(t, proxyCA, "front-proxy-client", nil), headers("X-Remote-User", "mallory"))
		if resp.code != http.StatusForbidden || !strings.Contains(resp.body, `User \"mallory\" cannot create resource \"applications/sync\" in API group \"deputy.dev\"`) {
			t.Errorf("code %d: %s", resp.code, resp.body)
		}
	})
	t.Run("the aggregation layer's availability check (system:masters) reads discovery", func(t *testing.T) {
		resp := f.do(t, http.MethodGet, "/apis/sync.deputy.dev/v1alpha1", "", "", "", withClientCert(t, proxyCA, "front-proxy-client", nil),
			headers("X-Remote-User", "system:kube-aggregator", "X-Remote-Group", "system:masters"))
		if resp.code != http.StatusOK {
			t.Fatalf("code %d: %s", resp.code, resp.body)
		}
		var list struct {
			GroupVersion string `json:"groupVersion"`
			Resources    []struct {
				Name string `json:"name"`
			} `json:"resources"`
		}
		if err := json.Unmarshal([]byte(resp.body), &list); err != nil || list.GroupVersion != "sync.deputy.dev/v1alpha1" || len(list.Resources) != 3 {
			t.Errorf("discovery %+v (%v): %s", list, err, resp.body)
		}
	})
}

func TestAPIDiscoveryNeedsAuthentication(t *testing.T) {
	f := newAPIFixture(t, nil)
	if resp := f.do(t, http.MethodGet, APIPrefix, "", "", ""); resp.code != http.StatusUnauthorized {
		t.Errorf("anonymous discovery: %d %s", resp.code, resp.body)
	}
	if resp := f.do(t, http.MethodGet, APIPrefix, bobAPIToken, "", ""); resp.code != http.StatusOK {
		t.Errorf("authenticated discovery: %d %s", resp.code, resp.body)
	}
}

func TestAPIAnonymousWhenEnabled(t *testing.T) {
	f := newAPIFixture(t, nil, func(a *APIAuthenticationOptions, _ *APIOptions) { a.Anonymous = true })
	resp := f.do(t, http.MethodPost, syncPath, "", "", "")
	if resp.code != http.StatusForbidden || !strings.Contains(resp.body, `User \"system:anonymous\"`) {
		t.Errorf("anonymous with anonymous enabled: %d %s, want 403 for system:anonymous", resp.code, resp.body)
	}
	// A bad credential is still 401, not anonymous (kube-apiserver's union.NewFailOnError).
	if resp := f.do(t, http.MethodPost, syncPath, "not-a-token", "", ""); resp.code != http.StatusUnauthorized {
		t.Errorf("bad token with anonymous enabled: %d %s", resp.code, resp.body)
	}
}

// A deputy project token acts only on its own project's Applications, even
// when the policy would allow more (here: the front proxy asserts the
// project extra, as kube-apiserver forwards a project token's user).
func TestAPIProjectTokenScope(t *testing.T) {
	proxyCA := newTestCA(t, "front-proxy-ca")
	f := newAPIFixture(t, nil, withFrontProxy(proxyCA))
	as := func(project string) func(*http.Request) {
		return headers("X-Remote-User", "deputy:project:"+project+":ci", "X-Remote-Group", "deployers",
			"X-Remote-Extra-"+strings.ReplaceAll(tokenreview.ExtraProject, "/", "%2F"), project)
	}
	cert := withClientCert(t, proxyCA, "front-proxy-client", nil)
	if resp := f.do(t, http.MethodPost, syncPath, "", "", "", cert, as("guestbook/other")); resp.code != http.StatusForbidden {
		t.Errorf("another project's token: %d %s, want 403", resp.code, resp.body)
	}
	// No group lifts the scope, not even system:masters.
	masters := headers("X-Remote-User", "deputy:project:guestbook/other:ci", "X-Remote-Group", "system:masters",
		"X-Remote-Extra-"+strings.ReplaceAll(tokenreview.ExtraProject, "/", "%2F"), "guestbook/other")
	if resp := f.do(t, http.MethodPost, syncPath, "", "", "", cert, masters); resp.code != http.StatusForbidden {
		t.Errorf("another project's token in system:masters: %d %s, want 403", resp.code, resp.body)
	}
	if resp := f.do(t, http.MethodGet, "/apis/deputy.dev/v1alpha1/namespaces/guestbook/applications/nope", "", "", "", cert, as("guestbook/guestbook")); resp.code != http.StatusForbidden {
		t.Errorf("a missing Application for a project token: %d %s, want 403 (no probing)", resp.code, resp.body)
	}
	if resp := f.do(t, http.MethodPost, syncPath, "", "", "", cert, as("guestbook/guestbook")); resp.code != http.StatusAccepted {
		t.Errorf("the project's own token: %d %s, want 202", resp.code, resp.body)
	}
	f.release()
}

// release lets the fixture's running sync finish.
func (f *apiFixture) release() {
	select {
	case <-f.runner.release:
	default:
		close(f.runner.release)
	}
}

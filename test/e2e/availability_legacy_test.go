package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/test/framework"
)

// TestLegacyFlags (issue 12, item 3) starts a second, short-lived
// kube-apiserver with the flags `deputy config apiserver --legacy-flags`
// prints (--authorization-mode=Node,Webhook,RBAC,
// --authorization-webhook-config-file, ...) in front of a deputy of its own,
// at the flags' default version v1beta1 (the version flags left out) and at
// v1, and checks deputy's three answers through them: allow (deputy's
// policy), no opinion (RBAC decides) and the gate's deny. Then it stops that
// deputy and checks what manifests/apiserver/README.md says the legacy flags
// cannot do: the gate is open, RBAC's blanket impersonate works.
func TestLegacyFlags(t *testing.T) {
	for _, tt := range []struct {
		name, version string
		args          map[string]string
	}{
		{name: "v1beta1, the default of the version flags", version: "v1beta1",
			args: map[string]string{"authorization-webhook-version": "", "authentication-token-webhook-version": ""}},
		{name: "v1", version: "v1"},
	} {
		t.Run(tt.name, func(t *testing.T) { runLegacyFlags(t, tt.version, tt.args) })
	}
}

func runLegacyFlags(t *testing.T, version string, apiserverArgs map[string]string) {
	d, err := framework.StartDeputy(framework.DeputyOptions{Bin: deputy.Bin, CertDir: deputy.CertDir, Args: []string{"--policy", filepath.Join("testdata", "policy")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	rec := startReviewRecorder(t, d.URL, deputy.CertDir)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	lcp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{
		DeputyBin: deputy.Bin, DeputyURL: rec.URL(), CertDir: deputy.CertDir, WorkDir: t.TempDir(),
		ConfigArgs: []string{"--authorized-ttl", "1s", "--unauthorized-ttl", "1s"}, LegacyFlags: true, APIServerArgs: apiserverArgs,
	})
	if err != nil {
		t.Fatalf("kube-apiserver with the legacy flags: %v\n%s", err, tail(d.Logs(), 30))
	}
	t.Cleanup(lcp.Stop)

	admin := kubernetes.NewForConfigOrDie(lcp.Admin)
	const ns = "legacy"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rbac := admin.RbacV1()
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bob"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmap-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// carol: the blanket impersonate serviceaccounts of the edit role.
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "impersonator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "impersonator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := func(name string) *rest.Config {
		u, err := lcp.Env.AddUser(envtest.User{Name: name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return u.Config()
	}
	alice, bob := kubernetes.NewForConfigOrDie(user("alice")), kubernetes.NewForConfigOrDie(user("bob"))
	carolCfg := user("carol")
	carolCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":deployer"}
	carolAsSA := kubernetes.NewForConfigOrDie(carolCfg)
	aliceToken := kubernetes.NewForConfigOrDie(lcp.TokenConfig(aliceToken))

	t.Run("allow: deputy's policy lets alice list pods in team-a (client certificate and deputy's token)", func(t *testing.T) {
		if _, err := alice.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("alice: %v", err)
		}
		if _, err := aliceToken.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("alice with deputy's token: %v", err)
		}
	})
	t.Run("no opinion: RBAC decides for bob", func(t *testing.T) {
		if _, err := bob.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("bob reading ConfigMaps (RBAC allows): %v", err)
		}
		_, err := bob.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "deputy") {
			t.Errorf("bob reading Secrets (nobody allows): %v, want Forbidden by RBAC", err)
		}
	})
	t.Run("gate deny: RBAC's blanket impersonate serviceaccounts does not get carol through", func(t *testing.T) {
		_, err := carolAsSA.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "deputy impersonation gate") {
			t.Errorf("carol impersonating a ServiceAccount: %v, want Forbidden by the gate", err)
		}
	})
	t.Run("kube-apiserver asked deputy at "+version, func(t *testing.T) {
		want := map[string]string{
			"/authorize":    "authorization.k8s.io/" + version + " SubjectAccessReview",
			"/authenticate": "authentication.k8s.io/" + version + " TokenReview",
		}
		for path, seen := range rec.Seen() {
			if w, ok := want[path]; ok && (len(seen) != 1 || seen[0] != w) {
				t.Errorf("%s received %v, want only %s", path, seen, w)
			}
			delete(want, path)
		}
		if len(want) > 0 {
			t.Errorf("never called: %v", want)
		}
	})

	t.Run("with deputy stopped the gate is open: what RBAC grants works", func(t *testing.T) {
		rec.Close() // deputy's address now refuses connections
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // deputy's cached answers (1s) expire
		start := time.Now()
		r, err := carolAsSA.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil || r.Status.UserInfo.Username != "system:serviceaccount:"+ns+":deployer" {
			t.Errorf("carol impersonating a ServiceAccount with deputy down: %v, %+v; the legacy flags fail open (manifests/apiserver/README.md)", err, r)
		}
		if _, err := bob.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("bob: %v", err)
		}
		if _, err := alice.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{}); err == nil {
			t.Errorf("alice listed pods with deputy down: only deputy's policy allows it")
		}
		t.Logf("three requests with deputy's address refusing connections took %s", time.Since(start).Round(time.Millisecond))
	})
}

// reviewRecorder stands between kube-apiserver and deputy (deputy's serving
// certificate towards kube-apiserver, kube-apiserver's client certificate
// towards deputy) and records the apiVersion and kind of each review body.
type reviewRecorder struct {
	srv  *httptest.Server
	once sync.Once
	mu   sync.Mutex
	seen map[string]map[string]bool // path -> "apiVersion kind"
}

func startReviewRecorder(t *testing.T, target, certDir string) *reviewRecorder {
	t.Helper()
	serving, err := tls.LoadX509KeyPair(filepath.Join(certDir, certs.ServingCertFile), filepath.Join(certDir, certs.ServingKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	client, err := tls.LoadX509KeyPair(filepath.Join(certDir, certs.ClientCertFile), filepath.Join(certDir, certs.ClientKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := certutil.NewPool(filepath.Join(certDir, certs.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true}
	r := &reviewRecorder{seen: map[string]map[string]bool{}}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, 8<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var tm metav1.TypeMeta
		_ = json.Unmarshal(body, &tm)
		r.mu.Lock()
		if r.seen[req.URL.Path] == nil {
			r.seen[req.URL.Path] = map[string]bool{}
		}
		r.seen[req.URL.Path][tm.APIVersion+" "+tm.Kind] = true
		r.mu.Unlock()
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		proxy.ServeHTTP(w, req)
	}))
	r.srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12}
	r.srv.EnableHTTP2 = true
	r.srv.StartTLS()
	t.Cleanup(r.Close)
	return r
}

// URL is the recorder's https://127.0.0.1:PORT, covered by deputy's serving
// certificate.
func (r *reviewRecorder) URL() string { return r.srv.URL }

// Seen returns, per path, the sorted "apiVersion kind" of the bodies received.
func (r *reviewRecorder) Seen() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for p, kinds := range r.seen {
		for k := range kinds {
			out[p] = append(out[p], k)
		}
		sort.Strings(out[p])
	}
	return out
}

// Close stops the recorder (idempotent).
func (r *reviewRecorder) Close() {
	r.once.Do(func() {
		r.srv.CloseClientConnections()
		r.srv.Close()
	})
}

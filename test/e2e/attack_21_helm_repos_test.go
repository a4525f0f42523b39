package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/syncer/source"
)

func sha256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// Issue 14 (attack 21): a tenant's chart source is hostile input. A chart repository
// the project does not list is never contacted; the operator's credential
// for a chart repository never leaves its origin, whatever index.yaml
// says; a chart larger than the limits is refused naming the limit, before
// anything reaches the cluster.
func TestAttack21HelmChartRepositories(t *testing.T) {
	const ns = "attack-21-helm"
	r := newChartRepo(t)
	trustTestServers(t, r.srv)
	var foreignMu sync.Mutex
	var foreign []string
	elsewhere := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		foreignMu.Lock()
		foreign = append(foreign, req.URL.Path+" "+req.Header.Get("Authorization"))
		foreignMu.Unlock()
		http.NotFound(w, req)
	}))
	defer elsewhere.Close()
	r.add(twoConfigMaps("1.0.0"), "")
	project := chartSyncSetup(t, ns, []string{r.srv.URL})
	engine := chartEngine(t, []string{r.srv.URL}, source.Limits{})

	t.Run("a chart repository not in sourceRepos is refused before any request", func(t *testing.T) {
		app := application("a21-unlisted", ns, elsewhere.URL, "", ns)
		app.Spec.Source.Chart = "pair"
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
		if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "application repo "+elsewhere.URL+" is not permitted in project '"+ns+"'") {
			t.Fatalf("%s", describe(st))
		}
		foreignMu.Lock()
		defer foreignMu.Unlock()
		if len(foreign) != 0 {
			t.Errorf("the unlisted repository was contacted: %q", foreign)
		}
	})
	t.Run("the repository's credential does not follow index.yaml to another host", func(t *testing.T) {
		r.add(twoConfigMaps("6.6.6"), elsewhere.URL+"/steal/pair-6.6.6.tgz")
		app := application("a21-steal", ns, r.srv.URL, "", ns)
		app.Spec.Source.Chart, app.Spec.Source.TargetRevision = "pair", "6.6.6"
		st := engine.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
		t.Logf("the sync: %s", describe(st))
		foreignMu.Lock()
		defer foreignMu.Unlock()
		if len(foreign) != 1 || !strings.HasPrefix(foreign[0], "/steal/pair-6.6.6.tgz ") || strings.TrimSpace(strings.TrimPrefix(foreign[0], "/steal/pair-6.6.6.tgz")) != "" {
			t.Errorf("the other host got %q, want one request without an Authorization header", foreign)
		}
		authorized := false
		for _, s := range r.requests() {
			if strings.HasPrefix(s, "/index.yaml Basic ") {
				authorized = true
			}
		}
		if !authorized {
			t.Errorf("the repository's own index.yaml was not fetched with its credential: %q", r.requests())
		}
	})
	t.Run("a chart larger than maxFetchBytes is refused naming the limit, and nothing is applied", func(t *testing.T) {
		big := twoConfigMaps("2.0.0")
		big.Files = append(big.Files, noiseFile(3<<20))
		r.add(big, "")
		small := chartEngine(t, []string{r.srv.URL}, source.Limits{MaxFetchBytes: 1 << 20})
		app := application("a21-big", ns, r.srv.URL, "", ns)
		app.Spec.Source.Chart, app.Spec.Source.TargetRevision = "pair", "2.0.0"
		st := small.Run(t.Context(), syncer.Request{Application: app, Project: project}, nil)
		if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "exceeds sync.limits.maxFetchBytes (1Mi)") || !strings.Contains(st.Message, "pair-2.0.0.tgz") {
			t.Fatalf("%s", describe(st))
		}
		if _, err := admin(t).CoreV1().ConfigMaps(ns).Get(t.Context(), "a21-big-a", metav1.GetOptions{}); err == nil {
			t.Errorf("the refused chart's ConfigMap exists")
		}
	})
}

// noiseFile is an incompressible file of n bytes for a chart.
func noiseFile(n int) *chart.File {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return &chart.File{Name: "noise.bin", Data: b}
}

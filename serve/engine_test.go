package serve

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
	"deputy.dev/deputy/syncer/source"
)

// Every limit an operator sets in sync.limits reaches the engine: a field
// added to one side and not mapped is zero on the other, and the engine
// would silently use its default.
func TestEngineLimitsMapsEveryField(t *testing.T) {
	in := config.SyncLimits{
		MaxFileBytes:     resource.MustParse("1Mi"),
		MaxRenderBytes:   resource.MustParse("2Mi"),
		MaxFiles:         3,
		MaxObjects:       4,
		MaxRenderMemory:  resource.MustParse("5Mi"),
		MaxFetchBytes:    resource.MustParse("6Mi"),
		MaxFetchObjects:  7,
		OperationTimeout: metav1.Duration{Duration: 8 * time.Second},
	}
	cv := reflect.ValueOf(in)
	for i := range cv.NumField() {
		if cv.Field(i).IsZero() {
			t.Fatalf("the test sets no value for config.SyncLimits.%s: add one", cv.Type().Field(i).Name)
		}
	}
	out := engineLimits(in)
	ev := reflect.ValueOf(out)
	for i := range ev.NumField() {
		if ev.Field(i).IsZero() {
			t.Errorf("source.Limits.%s is not mapped from config sync.limits", ev.Type().Field(i).Name)
		}
	}
	if out.MaxRenderMemory != 5<<20 || out.MaxFetchObjects != 7 || out.MaxFileBytes != 1<<20 || out.OperationTimeout != 8*time.Second {
		t.Errorf("engineLimits = %+v", out)
	}
}

func TestEngineOptionsCarryTheHealthTimeout(t *testing.T) {
	c := config.Default()
	c.Sync.HealthTimeout.Duration = 90 * time.Second
	c.Sync.Impersonation.Enabled = true
	o := engineOptions(c.Sync, nil, discardLog())
	if o.HealthTimeout != 90*time.Second || !o.Impersonation.Enabled || !o.Impersonation.Enforced || o.Clusters == nil || o.Source.CacheDir != c.Sync.CacheDir {
		t.Errorf("engineOptions = %+v", o)
	}
	if d := config.Default().Sync.HealthTimeout.Duration; d != syncer.DefaultHealthTimeout {
		t.Errorf("sync.healthTimeout defaults to %s, the engine to %s: keep them equal", d, syncer.DefaultHealthTimeout)
	}
}

func TestSyncClustersResolveNamesAndServers(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(clusterTestKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	r := syncClusters([]config.SyncCluster{
		{Name: "prod", Server: "https://prod.example:6443/", Kubeconfig: kc, Context: "ctx-b"},
		{Name: "broken", Server: "https://broken.example", Kubeconfig: filepath.Join(t.TempDir(), "missing")},
	}, discardLog())
	ctx := t.Context()

	server, err := r.ServerForName(ctx, "prod")
	if err != nil || server != "https://prod.example:6443" {
		t.Errorf("ServerForName(prod) = %q, %v", server, err)
	}
	cfg, err := r.RESTConfig(ctx, "https://prod.example:6443")
	if err != nil || cfg.Host != "https://b.example:6443" {
		t.Errorf("RESTConfig(prod) = %v, %v; want the kubeconfig context's host", cfg, err)
	}
	cfg.Host = "changed"
	if again, _ := r.RESTConfig(ctx, "https://prod.example:6443/"); again.Host != "https://b.example:6443" {
		t.Error("RESTConfig hands out its own configuration instead of a copy")
	}
	if _, err := r.ServerForName(ctx, "staging"); err == nil || !strings.Contains(err.Error(), `cluster "staging" is not registered with deputy (registered: prod (https://prod.example:6443), broken (https://broken.example))`) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := r.RESTConfig(ctx, "https://other"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("unknown server: %v", err)
	}
	if _, err := r.RESTConfig(ctx, "https://broken.example"); err == nil || !strings.Contains(err.Error(), `sync.clusters "broken"`) {
		t.Errorf("a cluster whose kubeconfig failed: %v", err)
	}
	var _ syncer.Clusters = r
	if _, err := syncClusters(nil, discardLog()).ServerForName(ctx, "in-cluster"); err == nil || !strings.Contains(err.Error(), "add the cluster to sync.clusters") {
		t.Errorf("empty registry: %v", err)
	}
}

func TestUnavailableRunnerFailsEveryOperationWithTheReason(t *testing.T) {
	app := &v1alpha1.Application{}
	st := unavailableRunner{reason: "cannot create .deputy/repos"}.Run(t.Context(), syncer.Request{Application: app, Sync: v1alpha1.SyncOperation{DryRun: true}}, nil)
	if st.Phase != v1alpha1.OperationError || !strings.Contains(st.Message, "sync engine not available: cannot create .deputy/repos") ||
		st.FinishedAt == nil || st.Operation.Sync == nil || !st.Operation.Sync.DryRun {
		t.Errorf("state %+v", st)
	}
}

// config may not import the engine (layout_test.go), so sync.limits'
// defaults are written twice: in config (what --print-config shows) and in
// source.DefaultLimits (what the engine falls back to). They must agree.
func TestConfigLimitDefaultsAreTheEngines(t *testing.T) {
	var s config.SyncSources
	config.SetSyncSourcesDefaults(&s)
	if got, want := engineLimits(s.Limits), source.DefaultLimits(); got != want {
		t.Errorf("config's sync.limits defaults map to %+v, the engine's defaults are %+v", got, want)
	}
}

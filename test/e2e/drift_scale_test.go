package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/test/framework"
)

// Issue 16's scale acceptance, measured: cluster mode with many
// Applications (default 1,000 of 10 ConfigMaps each in 100 namespaces), its
// steady-state CPU and memory, the API requests it makes per reconcile
// period (read from kube-apiserver's audit log, which records every request
// of deputy-system/deputy when DEPUTY_SCALE=1: main_test.go), and the time
// from a drift to OutOfSync. The figures go to docs/benchmarks.md ("Drift
// detection at scale"); the test logs them as lines starting with "SCALE "
// and asserts correctness only (every Application synced, drift detected,
// no per-object read, no write while nothing changes), never a time.

// scaleSA is the ServiceAccount each scale namespace's AppProject derives.
const scaleSA = "scale-deployer"

// scaleEnabled reports DEPUTY_SCALE=1: only then does TestDriftAtScale run
// and does the shared control plane audit deputy-system/deputy's reads.
func scaleEnabled() bool { return os.Getenv("DEPUTY_SCALE") == "1" }

// TestDriftAtScale measures drift detection at scale (issue 16). It is
// skipped unless DEPUTY_SCALE=1, so `make test` and CI never run it: with
// the defaults it takes 11–15 minutes of a 2-core machine. Run it alone:
//
//	cd test && DEPUTY_SCALE=1 DEPUTY_BIN=$PWD/../bin/deputy KUBEBUILDER_ASSETS=$PWD/../bin \
//	  go test -run TestDriftAtScale -timeout 90m -v ./e2e/
//
// Parameters (environment): DEPUTY_SCALE_APPS (default 1000),
// DEPUTY_SCALE_NAMESPACES (100; at most 10 Applications per namespace, one
// per directory of the repository), DEPUTY_SCALE_PERIOD (sync.reconcilePeriod,
// 60s; at least 10s), DEPUTY_SCALE_PERIODS (periods measured, 3),
// DEPUTY_SCALE_PARALLELISM (sync.parallelism, 32), DEPUTY_SCALE_DRIFTS (5),
// DEPUTY_SCALE_SYNC_TIMEOUT (until every Application is Synced, 40m). A
// quick check: DEPUTY_SCALE_APPS=20 DEPUTY_SCALE_NAMESPACES=2.
//
// Each namespace scale-NNN has the ServiceAccount scale-deployer, a Role
// letting it manage ConfigMaps there, and a deputy.dev AppProject
// scale-NNN deriving it. One local Git repository holds app-0 … app-9, ten
// ConfigMaps each (cm-D-I); Application app-K of a namespace syncs app-(K%10)
// into it, automated without selfHeal: deputy syncs each once, then only
// compares.
func TestDriftAtScale(t *testing.T) {
	if !scaleEnabled() {
		t.Skip("issue 16's scale measurement: set DEPUTY_SCALE=1 (11–15 minutes; see the doc comment)")
	}
	nApps := envInt(t, "DEPUTY_SCALE_APPS", 1000)
	nNS := envInt(t, "DEPUTY_SCALE_NAMESPACES", 100)
	period := envDuration(t, "DEPUTY_SCALE_PERIOD", time.Minute)
	periods := envInt(t, "DEPUTY_SCALE_PERIODS", 3)
	parallelism := envInt(t, "DEPUTY_SCALE_PARALLELISM", 32)
	drifts := envInt(t, "DEPUTY_SCALE_DRIFTS", 5)
	syncTimeout := envDuration(t, "DEPUTY_SCALE_SYNC_TIMEOUT", 40*time.Minute)
	perNS := nApps / nNS
	if nNS < 1 || nApps%nNS != 0 || perNS < 1 || perNS > 10 {
		t.Fatalf("DEPUTY_SCALE_APPS=%d must be a multiple of DEPUTY_SCALE_NAMESPACES=%d, 1 to 10 per namespace", nApps, nNS)
	}
	const objectsPerApp = 10
	t.Logf("SCALE config apps=%d namespaces=%d objects_per_app=%d period=%s periods=%d parallelism=%d", nApps, nNS, objectsPerApp, period, periods, parallelism)

	namespaces := make([]string, nNS)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("scale-%03d", i)
	}
	ensureNamespace(t, deputyNamespace)
	env := newReplicaEnv(t)
	env.writePolicy(t, "scale-operator", "e2e-scale-operator-token-5b8e1c", "")

	// --- the namespaces, their ServiceAccounts, Roles and AppProjects -------
	begin := time.Now()
	cs := admin(t)
	dyn := dynamic.NewForConfigOrDie(cp.Admin)
	if err := forEach(t.Context(), 8, namespaces, func(ctx context.Context, ns string) error {
		return setupScaleNamespace(ctx, cs, dyn, ns)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		projects := dyn.Resource(apps.ApplicationsResource.GroupVersion().WithResource("appprojects")).Namespace(deputyNamespace)
		_ = forEach(ctx, 8, namespaces, func(ctx context.Context, ns string) error {
			_ = projects.Delete(ctx, ns, metav1.DeleteOptions{})
			return nil
		})
	})
	deputyCfg := cp.TokenConfig(serviceAccountToken(t, deputyNamespace, "deputy"))
	for _, ns := range namespaces {
		sa := "system:serviceaccount:" + ns + ":" + scaleSA
		eventually(t, "the gate lets deputy-system/deputy act as "+sa, func() error {
			_, err := impersonating(deputyCfg, sa).CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{Limit: 1})
			return err
		})
	}
	t.Logf("SCALE setup namespaces=%d seconds=%.1f", nNS, time.Since(begin).Seconds())

	repo := newGitRepo(t)
	for d := range 10 {
		for i := range objectsPerApp {
			repo.write(fmt.Sprintf("app-%d/cm-%d-%d.yaml", d, d, i), fmt.Sprintf(
				"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%d-%d\ndata:\n  greeting: hello\n  index: %q\n", d, i, strconv.Itoa(i)))
		}
	}
	repo.commit("10 applications of 10 ConfigMaps")

	// --- the replica -----------------------------------------------------------
	replica := startScaleReplica(t, env, namespaces, period, parallelism)
	pid := replica.PID()
	ticks := clockTicks(t)

	// --- 1,000 Applications, synced once --------------------------------------
	type appRef struct{ ns, name, dir string }
	var all []appRef
	for _, ns := range namespaces {
		for k := range perNS {
			all = append(all, appRef{ns, fmt.Sprintf("app-%d", k), fmt.Sprintf("app-%d", k%10)})
		}
	}
	created := time.Now()
	cpuBefore, _ := procCPU(t, pid, ticks)
	if err := forEach(t.Context(), 8, all, func(ctx context.Context, a appRef) error {
		return createScaleApplication(ctx, a.ns, a.name, repo.dir, a.dir)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("SCALE created applications=%d seconds=%.1f", nApps, time.Since(created).Seconds())

	deadline := time.Now().Add(syncTimeout)
	for {
		p, err := scaleApplicationsProgress(t.Context(), namespaces)
		if err != nil {
			t.Fatal(err)
		}
		rss, _ := framework.RSS(pid)
		t.Logf("SCALE progress elapsed_s=%.0f synced=%d outofsync=%d other=%d op_succeeded=%d op_running=%d op_failed=%d rss_mib=%.1f",
			time.Since(created).Seconds(), p.synced, p.outOfSync, p.other, p.succeeded, p.running, p.failed, mib(rss))
		if p.synced == nApps && p.succeeded == nApps {
			break
		}
		if replica.Exited() {
			t.Fatalf("the replica exited:\n%s", tail(replica.Logs(), 80))
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every Application is Synced after %s: %+v; some: %s\nreplica log (tail):\n%s", syncTimeout, p, strings.Join(p.samples, "; "), tail(replica.Logs(), 60))
		}
		time.Sleep(10 * time.Second)
	}
	allSynced := time.Now()
	cpuSync, _ := procCPU(t, pid, ticks)
	peak, _ := framework.PeakRSS(pid)
	t.Logf("SCALE first_sync applications=%d objects=%d seconds=%.1f cpu_s=%.1f children_cpu_s=%.1f peak_rss_mib=%.1f",
		nApps, nApps*objectsPerApp, allSynced.Sub(created).Seconds(), (cpuSync.self - cpuBefore.self).Seconds(), (cpuSync.children - cpuBefore.children).Seconds(), mib(peak))

	// --- steady state ------------------------------------------------------------
	time.Sleep(period) // one period after all are Synced
	var windows []auditWindow
	start := time.Now()
	cpu0, _ := procCPU(t, pid, ticks)
	type periodFigures struct {
		cpu, children time.Duration
		rss           int64
	}
	var figs []periodFigures
	for i := range periods {
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * period)))
		end := time.Now()
		cpu, _ := procCPU(t, pid, ticks)
		rss, err := framework.RSS(pid)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, auditWindow{name: fmt.Sprintf("period-%d", i+1), from: start.Add(time.Duration(i) * period), to: end})
		figs = append(figs, periodFigures{cpu: cpu.self - cpu0.self, children: cpu.children - cpu0.children, rss: rss})
		cpu0 = cpu
	}
	for i, f := range figs {
		t.Logf("SCALE steady period=%d seconds=%.1f cpu_s=%.2f cpu_pct=%.1f children_cpu_s=%.2f rss_mib=%.1f",
			i+1, period.Seconds(), f.cpu.Seconds(), 100*f.cpu.Seconds()/period.Seconds(), f.children.Seconds(), mib(f.rss))
	}
	peak, _ = framework.PeakRSS(pid)
	t.Logf("SCALE steady peak_rss_mib=%.1f", mib(peak))
	logScaleMetrics(t, replica)

	// The audit log: every request of deputy-system/deputy, per period.
	stats, err := scanAudit(auditLog, deputyUser, append(windows, auditWindow{name: "since-start", from: created, to: time.Now()}))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range stats[:len(windows)] {
		w.log(t)
		for _, ev := range w.objectGets {
			t.Errorf("%s: a per-object read in steady state: %s", w.name, describeAudit(ev))
		}
		for _, ev := range w.objectWrites {
			t.Errorf("%s: an apply or write of a tracked object in steady state: %s", w.name, describeAudit(ev))
		}
		if n := w.statusWrites; n > 0 {
			t.Errorf("%s: %d Application status writes while nothing changed, want 0", w.name, n)
		}
	}
	stats[0].logSamples(t)
	whole := stats[len(windows)]
	whole.log(t)
	t.Logf("SCALE scopes configmap_list_watch_scopes_since_start=%d (namespaces %d)", len(whole.configMapScopes), nNS)

	// --- drift → OutOfSync ---------------------------------------------------------
	driftStart := time.Now()
	var latencies []time.Duration
	var driftWindows []auditWindow
	for i := range drifts {
		a := all[(i*len(all))/drifts%len(all)]
		cm := fmt.Sprintf("cm-%s-0", strings.TrimPrefix(a.dir, "app-"))
		if st := getApplication(t, a.ns, a.name).Status.Sync.Status; st != v1alpha1.SyncStatusCodeSynced {
			t.Fatalf("%s/%s is %s before its drift, want Synced", a.ns, a.name, st)
		}
		patch := fmt.Sprintf(`{"data":{"greeting":"drifted-%d"}}`, i)
		t0 := time.Now()
		if _, err := cs.CoreV1().ConfigMaps(a.ns).Patch(t.Context(), cm, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
		var got *v1alpha1.Application
		limit := 2*period + time.Minute
		for time.Since(t0) < limit {
			app := getApplication(t, a.ns, a.name)
			if app.Status.Sync.Status == v1alpha1.SyncStatusCodeOutOfSync {
				got = app
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got == nil {
			t.Errorf("drift %d: %s/%s not OutOfSync %s after ConfigMap %s changed", i+1, a.ns, a.name, limit, cm)
			continue
		}
		d := time.Since(t0)
		latencies = append(latencies, d)
		driftWindows = append(driftWindows, auditWindow{name: fmt.Sprintf("drift-%d", i+1), from: t0, to: time.Now()})
		msg := ""
		for _, r := range got.Status.Resources {
			if r.Kind == "ConfigMap" && r.Name == cm {
				msg = r.Status + ": " + r.Message
			}
		}
		if !strings.HasPrefix(msg, v1alpha1.SyncStatusCodeOutOfSync) {
			t.Errorf("drift %d: status.resources of %s/%s says %q for ConfigMap %s, want OutOfSync", i+1, a.ns, a.name, msg, cm)
		}
		t.Logf("SCALE drift n=%d application=%s/%s configmap=%s latency_ms=%d resource=%q", i+1, a.ns, a.name, cm, d.Milliseconds(), msg)
	}
	if len(latencies) > 0 {
		slices.Sort(latencies)
		t.Logf("SCALE drift_latency n=%d median_ms=%d max_ms=%d min_ms=%d", len(latencies), latencies[len(latencies)/2].Milliseconds(),
			latencies[len(latencies)-1].Milliseconds(), latencies[0].Milliseconds())
	}
	dstats, err := scanAudit(auditLog, deputyUser, append([]auditWindow{{name: "drifts", from: driftStart, to: time.Now()}}, driftWindows...))
	if err != nil {
		t.Fatal(err)
	}
	dstats[0].log(t)
	for _, ev := range dstats[0].objectGets {
		t.Errorf("drifts: a per-object read: %s", describeAudit(ev))
	}
	// Between each patch and OutOfSync: did a periodic pass (a GET of
	// every Application) run meanwhile?
	for _, w := range dstats[1:] {
		t.Logf("SCALE drift_window window=%s seconds=%.2f application_gets=%d total=%d", w.name, w.to.Sub(w.from).Seconds(),
			w.counts["get applications.deputy.dev self"], w.total)
	}
}

// --- setup ----------------------------------------------------------------------

// setupScaleNamespace creates ns, its ServiceAccount scaleSA with a Role on
// ConfigMaps, and the deputy.dev AppProject ns in deputy-system deriving it
// for Applications in ns.
func setupScaleNamespace(ctx context.Context, cs *kubernetes.Clientset, dyn dynamic.Interface, ns string) error {
	ignoreExists := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: scaleSA}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: scaleSA},
		Rules: []rbacv1.PolicyRule{rule("", []string{"configmaps"}, "get", "list", "watch", "create", "patch", "delete")}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: scaleSA},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: scaleSA},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: scaleSA}}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	project := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "deputy.dev/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": ns, "namespace": deputyNamespace},
		"spec": map[string]any{
			"sourceNamespaces": []any{ns},
			"sourceRepos":      []any{"*"},
			"destinations":     []any{map[string]any{"server": inCluster, "namespace": ns}},
			"destinationServiceAccounts": []any{map[string]any{
				"server": inCluster, "namespace": ns, "defaultServiceAccount": scaleSA}},
		},
	}}
	_, err := dyn.Resource(apps.ApplicationsResource.GroupVersion().WithResource("appprojects")).Namespace(deputyNamespace).Create(ctx, project, metav1.CreateOptions{})
	return ignoreExists(err)
}

// startScaleReplica starts a cluster-mode replica (deputy-system/deputy)
// for the scale namespaces' Applications, logging at info, and waits until
// it leads.
func startScaleReplica(t *testing.T, env *replicaEnv, namespaces []string, period time.Duration, parallelism int) *framework.Deputy {
	t.Helper()
	nsList, _ := json.Marshal(namespaces)
	identity := "scale-1"
	cfg := fmt.Sprintf(`apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
sync:
  impersonation: {enabled: true}
  cacheDir: %s
  localRepositories: [%s]
  applicationNamespaces: %s
  parallelism: %d
  reconcilePeriod: %s
  leaderElection:
    leaseNamespace: %s
    leaseName: %s
    identity: %s
`, filepath.Join(env.dir, "cache-"+identity), repoRoot, nsList, parallelism, period, deputyNamespace, haLease, identity)
	cfgFile := filepath.Join(env.dir, identity+".yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, err := framework.DeputyBinary()
	if err != nil {
		t.Fatal(err)
	}
	// --log-level info after the framework's debug: debug lines for every
	// comparison would be part of what is measured.
	d, err := framework.StartDeputy(framework.DeputyOptions{Bin: bin, CertDir: deputy.CertDir,
		Args: []string{"--config", cfgFile, "--kubeconfig", env.kubeconfig, "--policy", env.policyDir, "--log-level", "info"},
		Env:  []string{"POD_NAMESPACE=" + deputyNamespace}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Stop()
		if t.Failed() {
			t.Logf("replica %s log (tail):\n%s", identity, tail(d.Logs(), 80))
		}
	})
	waitLeader(t, identity)
	return d
}

// createScaleApplication creates Application ns/name syncing path of repo
// into ns, automated without selfHeal.
func createScaleApplication(ctx context.Context, ns, name, repo, path string) error {
	app := &v1alpha1.Application{
		TypeMeta:   metav1.TypeMeta{APIVersion: "deputy.dev/v1alpha1", Kind: "Application"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ApplicationSpec{
			Project:     ns,
			Source:      v1alpha1.ApplicationSource{RepoURL: repo, Path: path},
			Destination: v1alpha1.ApplicationDestination{Server: inCluster, Namespace: ns},
			SyncPolicy:  &v1alpha1.SyncPolicy{Automated: &v1alpha1.SyncPolicyAutomated{}},
		},
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(app)
	if err != nil {
		return err
	}
	delete(content, "status")
	_, err = applicationsClient().Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: content}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// scaleProgress counts the Applications by status.sync and operation phase.
type scaleProgress struct {
	synced, outOfSync, other   int
	succeeded, running, failed int
	samples                    []string // a few that are not done
}

func scaleApplicationsProgress(ctx context.Context, namespaces []string) (scaleProgress, error) {
	var p scaleProgress
	list, err := applicationsClient().List(ctx, metav1.ListOptions{})
	if err != nil {
		return p, err
	}
	for i := range list.Items {
		u := &list.Items[i]
		if !slices.Contains(namespaces, u.GetNamespace()) {
			continue
		}
		app := &v1alpha1.Application{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, app); err != nil {
			return p, err
		}
		switch app.Status.Sync.Status {
		case v1alpha1.SyncStatusCodeSynced:
			p.synced++
		case v1alpha1.SyncStatusCodeOutOfSync:
			p.outOfSync++
		default:
			p.other++
		}
		phase := ""
		if st := app.Status.OperationState; st != nil {
			phase = string(st.Phase)
		}
		switch phase {
		case string(v1alpha1.OperationSucceeded):
			p.succeeded++
		case string(v1alpha1.OperationRunning):
			p.running++
		case "":
		default:
			p.failed++
		}
		if (app.Status.Sync.Status != v1alpha1.SyncStatusCodeSynced || phase != string(v1alpha1.OperationSucceeded)) && len(p.samples) < 5 {
			msg := ""
			if st := app.Status.OperationState; st != nil {
				msg = st.Message
			}
			for _, c := range app.Status.Conditions {
				msg += " [" + c.Type + ": " + c.Message + "]"
			}
			p.samples = append(p.samples, fmt.Sprintf("%s/%s sync=%q phase=%q %s", app.Namespace, app.Name, app.Status.Sync.Status, phase, msg))
		}
	}
	return p, nil
}

// --- process figures ---------------------------------------------------------------

// cpuTimes are a process's CPU seconds (user + system) and those of its
// children it waited for (render workers).
type cpuTimes struct{ self, children time.Duration }

// procCPU reads utime+stime and cutime+cstime of pid from /proc/PID/stat.
func procCPU(t *testing.T, pid int, ticks float64) (cpuTimes, error) {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTimes{}, err
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	val := func(field int) float64 {
		v, _ := strconv.ParseFloat(f[field-3], 64)
		return v
	}
	sec := func(v float64) time.Duration { return time.Duration(v / ticks * float64(time.Second)) }
	return cpuTimes{self: sec(val(14) + val(15)), children: sec(val(16) + val(17))}, nil
}

// clockTicks is sysconf(_SC_CLK_TCK) as getconf prints it (100 if not).
func clockTicks(t *testing.T) float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
			return v
		}
	}
	t.Logf("getconf CLK_TCK: %v; assuming 100", err)
	return 100
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// logScaleMetrics logs the replica's /metrics lines about the live-state
// cache (livestate), if it exports any.
func logScaleMetrics(t *testing.T, d *framework.Deputy) {
	t.Helper()
	c, err := d.Client(false)
	if err != nil {
		t.Logf("SCALE metrics error=%q", err)
		return
	}
	resp, err := c.Get(d.URL + "/metrics")
	if err != nil {
		t.Logf("SCALE metrics error=%q", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	n := 0
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.Contains(l, "livestate") || strings.Contains(l, "scope") || strings.Contains(l, "compar") || strings.Contains(l, "drift") {
			t.Logf("SCALE metric %s", l)
			n++
		}
	}
	if n == 0 {
		t.Logf("SCALE metrics none about the live-state cache (livestate, scope, compar, drift) among %d bytes", len(body))
	}
}

// --- the audit log ---------------------------------------------------------------

// auditWindow is a time range of requests (by requestReceivedTimestamp).
type auditWindow struct {
	name     string
	from, to time.Time
}

// auditStats are one window's requests of one user.
type auditStats struct {
	auditWindow
	// counts by "verb resource as", as "self" or "impersonated".
	counts map[string]int
	total  int
	// configMapScopes are the (namespace, identity) pairs configmaps were
	// listed or watched in.
	configMapScopes map[string]bool
	// objectGets are reads of one ConfigMap; objectWrites writes of
	// ConfigMaps; statusWrites writes of applications/status.
	objectGets, objectWrites []framework.AuditEvent
	statusWrites             int
	// samples holds the first audit line of each count key.
	samples map[string]string
}

// scanAudit reads the audit log once and counts user's requests (each
// audit ID once, whatever its stages) received within each window.
func scanAudit(path, user string, windows []auditWindow) ([]*auditStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make([]*auditStats, len(windows))
	for i, w := range windows {
		out[i] = &auditStats{auditWindow: w, counts: map[string]int{}, configMapScopes: map[string]bool{}, samples: map[string]string{}}
	}
	seen := map[string]bool{}
	type event struct {
		framework.AuditEvent
		AuditID string `json:"auditID"`
	}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for s.Scan() {
		line := s.Bytes()
		if !bytes.Contains(line, []byte(user)) {
			continue
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, err
		}
		if ev.User.Username != user || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		for _, st := range out {
			if ev.RequestReceivedTimestamp.Before(st.from) || !ev.RequestReceivedTimestamp.Before(st.to) {
				continue
			}
			if k := st.add(ev.AuditEvent); st.samples[k] == "" {
				st.samples[k] = string(line)
			}
		}
	}
	return out, s.Err()
}

// add counts ev and returns its count key.
func (st *auditStats) add(ev framework.AuditEvent) string {
	as := "self"
	if ev.ImpersonatedUser != nil {
		as = "impersonated"
	}
	key := ev.Verb + " " + auditResource(ev) + " " + as
	st.counts[key]++
	st.total++
	r := ev.ObjectRef
	if r == nil {
		return key
	}
	switch {
	case r.Resource == "configmaps" && r.APIGroup == "" && (ev.Verb == "list" || ev.Verb == "watch"):
		who := "self"
		if ev.ImpersonatedUser != nil {
			who = ev.ImpersonatedUser.Username
		}
		st.configMapScopes[r.Namespace+" "+who] = true
	case r.Resource == "configmaps" && r.APIGroup == "" && ev.Verb == "get":
		st.objectGets = append(st.objectGets, ev)
	case r.Resource == "configmaps" && r.APIGroup == "" && slices.Contains([]string{"create", "update", "patch", "delete"}, ev.Verb):
		st.objectWrites = append(st.objectWrites, ev)
	case r.Resource == "applications" && r.Subresource == "status" && (ev.Verb == "update" || ev.Verb == "patch"):
		st.statusWrites++
	}
	return key
}

// auditResource names a request's resource: resource[.group][/subresource],
// or the path of a non-resource request.
func auditResource(ev framework.AuditEvent) string {
	r := ev.ObjectRef
	if r == nil {
		p, _, _ := strings.Cut(ev.RequestURI, "?")
		if strings.HasPrefix(p, "/apis/") && strings.Count(p, "/") > 2 {
			p = "/apis/GROUP/VERSION" // discovery of one group version
		}
		return "nonresource:" + p
	}
	s := r.Resource
	if r.APIGroup != "" {
		s += "." + r.APIGroup
	}
	if r.Subresource != "" {
		s += "/" + r.Subresource
	}
	return s
}

// logSamples logs the first audit line of each count key (evidence).
func (st *auditStats) logSamples(t *testing.T) {
	t.Helper()
	keys := make([]string, 0, len(st.samples))
	for k := range st.samples {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("SCALE audit_sample window=%s key=%q line=%s", st.name, k, st.samples[k])
	}
}

// log logs the window's counts, one line per verb, resource and identity.
func (st *auditStats) log(t *testing.T) {
	t.Helper()
	keys := make([]string, 0, len(st.counts))
	for k := range st.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Logf("SCALE requests window=%s seconds=%.1f total=%d configmap_scopes=%d status_writes=%d configmap_gets=%d configmap_writes=%d",
		st.name, st.to.Sub(st.from).Seconds(), st.total, len(st.configMapScopes), st.statusWrites, len(st.objectGets), len(st.objectWrites))
	for _, k := range keys {
		f := strings.Fields(k)
		t.Logf("SCALE requests window=%s verb=%s resource=%s as=%s count=%d", st.name, f[0], f[1], f[2], st.counts[k])
	}
}

func describeAudit(ev framework.AuditEvent) string {
	raw, _ := json.Marshal(ev)
	return string(raw)
}

// --- helpers -----------------------------------------------------------------------

// forEach runs f on every item, workers at a time; the first error wins
// (the others still run).
func forEach[T any](ctx context.Context, workers int, items []T, f func(context.Context, T) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	ch := make(chan T)
	for range workers {
		wg.Go(func() {
			for it := range ch {
				if err := f(ctx, it); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
	return first
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}

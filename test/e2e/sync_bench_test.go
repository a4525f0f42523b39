package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// benchObjects is the size of the benchmark application.
const benchObjects = 1000

// BenchmarkSyncEngineVsKubectl applies an application of 1,000 ConfigMaps
// from a Git repository twice (create, then an unchanged re-apply), after
// one unmeasured warm-up create each, with
// deputy's engine (test/load/syncbench, its own process) and with `kubectl
// apply --server-side` on the same files, both as the same ServiceAccount
// impersonated by the same controller identity, through the same
// kube-apiserver and deputy. It reports wall seconds per run (process start
// to exit, both) and each process's peak resident memory. Run:
//
//	cd test && DEPUTY_BIN=$PWD/../bin/deputy KUBEBUILDER_ASSETS=$PWD/../bin \
//	  go test -run '^$' -bench SyncEngineVsKubectl -benchtime 1x ./e2e/
//
// SYNC_BENCH_SWEEP=1,4,16,64 adds deputy creates and re-applies at those
// parallelisms (each next to a kubectl create), with the CPU seconds that
// kube-apiserver, etcd and deputy's webhook spent on each.
//
// The server floor (issue 15) runs in the same iteration: the same 1,000
// files created by test/load/applyfloor, a plain client-go server-side-apply
// loop at the engine's parallelism (syncer.DefaultParallelism), as the admin
// (system:masters: no impersonation, no webhook, no preflight), wall time
// process start to exit like the others; deputy's first sync is reported as
// a fraction of the floor's speed (floor seconds / deputy seconds). The same
// loop as the controller impersonating the ServiceAccount (what every one of
// deputy's requests pays on the server) is reported next to it.
// SYNC_BENCH_PROFILE=DIR writes pprof CPU profiles of deputy's measured
// create (syncbench-create.pprof, the engine's process) and of kube-apiserver
// during it (kube-apiserver-create.pprof) into DIR.
func BenchmarkSyncEngineVsKubectl(b *testing.B) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		b.Skip("kubectl is not installed")
	}
	ctx := b.Context()
	cs := kubernetes.NewForConfigOrDie(cp.Admin)
	dir := b.TempDir()
	const saNS, sa = "bench", "bench-deployer"
	saUser := "system:serviceaccount:" + saNS + ":" + sa

	// Identities: the controller (a token), the ServiceAccount it
	// impersonates, which may read, create and patch ConfigMaps (a deployer
	// role as Argo CD needs it; kubectl needs only create and patch, deputy
	// uses list to skip what is unchanged and applies everything without it).
	for _, ns := range []string{"argocd", saNS} {
		benchCreate(b, func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		})
	}
	token := benchToken(b, cs, "argocd", "argocd-application-controller")
	benchToken(b, cs, saNS, sa)
	benchCreate(b, func() error {
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-bench-configmaps"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "patch"}}}}, metav1.CreateOptions{})
		return err
	})
	benchCreate(b, func() error {
		_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-bench-configmaps"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-bench-configmaps"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: saNS, Name: sa}}}, metav1.CreateOptions{})
		return err
	})

	// The project: destinations bench-*, derived ServiceAccount bench:bench-deployer.
	project := v1alpha1.AppProject{TypeMeta: metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "AppProject"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "bench"}, Spec: v1alpha1.AppProjectSpec{
			SourceRepos:                []string{"*"},
			Destinations:               []v1alpha1.ApplicationDestination{{Server: inCluster, Namespace: "bench-*"}},
			DestinationServiceAccounts: []v1alpha1.ApplicationDestinationServiceAccount{{Server: inCluster, Namespace: "bench-*", DefaultServiceAccount: saNS + ":" + sa}},
			ClusterResourceWhitelist:   []v1alpha1.ClusterResourceRestrictionItem{{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"}},
		}}
	projectJSON, err := json.Marshal(project)
	if err != nil {
		b.Fatal(err)
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(projectJSON); err != nil {
		b.Fatal(err)
	}
	force := true
	if _, err := dynamic.NewForConfigOrDie(cp.Admin).Resource(argoProjects).Namespace("argocd").Patch(ctx, "bench", types.ApplyPatchType, projectJSON,
		metav1.PatchOptions{FieldManager: "e2e", Force: &force}); err != nil {
		b.Fatal(err)
	}

	// Files: the repository, the controller's kubeconfig and credentials.
	repoDir := filepath.Join(dir, "repo")
	benchRepo(b, repoDir)
	files := map[string][]byte{"project.json": projectJSON, "token": []byte(token), "ca.crt": cp.Admin.CAData}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(dir, "controller.kubeconfig")
	if err := cp.WriteTokenKubeconfig(kubeconfig, token); err != nil {
		b.Fatal(err)
	}
	syncbench, applyfloor := filepath.Join(dir, "syncbench"), filepath.Join(dir, "applyfloor")
	for _, tool := range []string{syncbench, applyfloor} {
		build := exec.CommandContext(ctx, "go", "build", "-o", tool, "./load/"+filepath.Base(tool))
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", filepath.Base(tool), err, out)
		}
	}
	floorRun := func(ns string, impersonated bool) (benchRun, applyfloorResult) {
		args := []string{"-kubeconfig", cp.AdminKubeconfig, "-dir", filepath.Join(repoDir, "cms"), "-namespace", ns}
		if impersonated {
			args = []string{"-kubeconfig", kubeconfig, "-as", saUser, "-dir", filepath.Join(repoDir, "cms"), "-namespace", ns}
		}
		r := runMeasured(b, applyfloor, args...)
		return r, parseApplyfloor(b, r)
	}
	benchWaitForGate(b, token, saUser)

	// Warm-up (not measured): one create with each tool into throwaway
	// namespaces, so that neither pays for cold caches (kube-apiserver's,
	// deputy's webhook connections, kubectl's discovery cache).
	warm := fmt.Sprintf("%d", time.Now().Unix())
	for _, ns := range []string{"bench-warm-deputy-" + warm, "bench-warm-kubectl-" + warm, "bench-warm-floor-" + warm, "bench-warm-floor-sa-" + warm} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	warmDeputy := runMeasured(b, syncbench, "-server", cp.Admin.Host, "-ca", filepath.Join(dir, "ca.crt"), "-token-file", filepath.Join(dir, "token"),
		"-project", filepath.Join(dir, "project.json"), "-repo", repoDir, "-path", "cms", "-namespace", "bench-warm-deputy-"+warm)
	parseSyncbench(b, warmDeputy)
	runMeasured(b, kubectl, "--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(dir, "kube-cache"), "apply", "--server-side",
		"--validate=false", "-f", filepath.Join(repoDir, "cms"), "-n", "bench-warm-kubectl-"+warm, "--as", saUser)
	floorRun("bench-warm-floor-"+warm, false)
	floorRun("bench-warm-floor-sa-"+warm, true)
	profileDir := os.Getenv("SYNC_BENCH_PROFILE")

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		suffix := fmt.Sprintf("%d-%d", time.Now().Unix(), i)
		nsDeputy, nsKubectl, nsFloor, nsFloorSA := "bench-deputy-"+suffix, "bench-kubectl-"+suffix, "bench-floor-"+suffix, "bench-floor-sa-"+suffix
		for _, ns := range []string{nsDeputy, nsKubectl, nsFloor, nsFloorSA} {
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		deputyRun := func(extra ...string) benchRun {
			return runMeasured(b, syncbench, append([]string{"-server", cp.Admin.Host, "-ca", filepath.Join(dir, "ca.crt"), "-token-file", filepath.Join(dir, "token"),
				"-project", filepath.Join(dir, "project.json"), "-repo", repoDir, "-path", "cms", "-namespace", nsDeputy}, extra...)...)
		}
		kubectlRun := func() benchRun {
			// --validate=false: kubectl's validation downloads /openapi/v3,
			// which deputy's gate does not let an impersonated identity
			// read (only discovery: /api, /apis, /version). deputy's engine
			// sends no field validation either.
			return runMeasured(b, kubectl, "--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(dir, "kube-cache"), "apply", "--server-side",
				"--validate=false", "-f", filepath.Join(repoDir, "cms"), "-n", nsKubectl, "--as", saUser)
		}
		var dCreate, kCreate, dResync, kResync benchRun
		// The floor, deputy's first sync and the impersonated floor, one
		// after the other, each with the CPU the server side spent on it.
		before := processCPU("kube-apiserver", "etcd", "deputy")
		fCreate, fRes := floorRun(nsFloor, false)
		fCPU := cpuDelta(before, processCPU("kube-apiserver", "etcd", "deputy"))
		before = processCPU("kube-apiserver", "etcd", "deputy")
		var waitProfile func()
		var profileArgs []string
		if profileDir != "" {
			profileArgs = []string{"-cpuprofile", filepath.Join(profileDir, "syncbench-create.pprof")}
			// As long as the warm-up's create took: about the measured one.
			waitProfile = profileAPIServer(b, filepath.Join(profileDir, "kube-apiserver-create.pprof"), max(1, int(warmDeputy.wall.Seconds()+0.5)))
		}
		dCreate = deputyRun(profileArgs...)
		dCPU := cpuDelta(before, processCPU("kube-apiserver", "etcd", "deputy"))
		if waitProfile != nil {
			waitProfile()
		}
		before = processCPU("kube-apiserver", "etcd", "deputy")
		fsCreate, fsRes := floorRun(nsFloorSA, true)
		fsCPU := cpuDelta(before, processCPU("kube-apiserver", "etcd", "deputy"))
		kCreate = kubectlRun()
		dResync = deputyRun()
		kResync = kubectlRun()
		for _, r := range []benchRun{dCreate, dResync} {
			res := parseSyncbench(b, r)
			benchLogf(b, "deputy: Run %.2fs (%.2fs before the first apply) of %.2fs wall; VmHWM %d KiB (self-reported) / %d KiB (sampled)",
				res.Seconds, res.BeforeApplySeconds, r.wall.Seconds(), res.VmHWMKiB, r.maxRSSKiB)
		}
		benchLogf(b, "floor (admin, %d goroutines): create %.2fs wall (%.2fs applying), VmHWM %d KiB; CPU: applyfloor %.2fs, %s",
			syncer.DefaultParallelism, fCreate.wall.Seconds(), fRes.Seconds, fCreate.maxRSSKiB, fCreate.cpu, fCPU)
		benchLogf(b, "deputy first sync: %.2fs wall; CPU: syncbench %.2fs, %s", dCreate.wall.Seconds(), dCreate.cpu, dCPU)
		benchLogf(b, "floor (impersonating %s): create %.2fs wall (%.2fs applying), VmHWM %d KiB; CPU: applyfloor %.2fs, %s",
			saUser, fsCreate.wall.Seconds(), fsRes.Seconds, fsCreate.maxRSSKiB, fsCreate.cpu, fsCPU)
		benchLogf(b, "deputy's first sync at %.2f× the floor's speed (%.2f× the impersonated floor's)",
			fCreate.wall.Seconds()/dCreate.wall.Seconds(), fsCreate.wall.Seconds()/dCreate.wall.Seconds())
		for _, ns := range []string{nsDeputy, nsKubectl, nsFloor, nsFloorSA} {
			list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, cm := range list.Items {
				if strings.HasPrefix(cm.Name, "cm-") {
					n++
				}
			}
			if n != benchObjects {
				b.Fatalf("%s holds %d ConfigMaps, want %d", ns, n, benchObjects)
			}
		}
		benchLogf(b, "kubectl: create %.2fs (VmHWM %d KiB), re-apply %.2fs (VmHWM %d KiB)", kCreate.wall.Seconds(), kCreate.maxRSSKiB, kResync.wall.Seconds(), kResync.maxRSSKiB)
		// SYNC_BENCH_SWEEP="1,4,16,32": deputy creates at other parallelisms.
		if sweep := os.Getenv("SYNC_BENCH_SWEEP"); sweep != "" {
			for _, p := range strings.Split(sweep, ",") {
				ns := "bench-sweep-" + p + "-" + suffix
				if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				for _, phase := range []string{"create", "re-apply"} {
					before := processCPU("kube-apiserver", "etcd", "deputy")
					r := runMeasured(b, syncbench, "-server", cp.Admin.Host, "-ca", filepath.Join(dir, "ca.crt"), "-token-file", filepath.Join(dir, "token"),
						"-project", filepath.Join(dir, "project.json"), "-repo", repoDir, "-path", "cms", "-namespace", ns, "-parallelism", p)
					res := parseSyncbench(b, r)
					benchLogf(b, "deputy -parallelism %s: %s %.2fs wall (Run %.2fs, %.2fs before the first apply), VmHWM %d KiB; CPU: syncbench %.2fs, %s",
						p, phase, r.wall.Seconds(), res.Seconds, res.BeforeApplySeconds, r.maxRSSKiB, r.cpu, cpuDelta(before, processCPU("kube-apiserver", "etcd", "deputy")))
				}
				kns := "bench-sweep-kubectl-" + p + "-" + suffix
				if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kns}}, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				before := processCPU("kube-apiserver", "etcd", "deputy")
				r := runMeasured(b, kubectl, "--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(dir, "kube-cache"), "apply", "--server-side",
					"--validate=false", "-f", filepath.Join(repoDir, "cms"), "-n", kns, "--as", saUser)
				benchLogf(b, "kubectl (round %s): create %.2fs wall, VmHWM %d KiB; CPU: kubectl %.2fs, %s", p, r.wall.Seconds(), r.maxRSSKiB, r.cpu, cpuDelta(before, processCPU("kube-apiserver", "etcd", "deputy")))
			}
		}
		b.ReportMetric(fCreate.wall.Seconds(), "floor-create-s")
		b.ReportMetric(fsCreate.wall.Seconds(), "floor-sa-create-s")
		b.ReportMetric(fCreate.wall.Seconds()/dCreate.wall.Seconds(), "deputy-vs-floor-x")
		b.ReportMetric(dCreate.wall.Seconds(), "deputy-create-s")
		b.ReportMetric(kCreate.wall.Seconds(), "kubectl-create-s")
		b.ReportMetric(kCreate.wall.Seconds()/dCreate.wall.Seconds(), "create-speedup-x")
		b.ReportMetric(dResync.wall.Seconds(), "deputy-resync-s")
		b.ReportMetric(kResync.wall.Seconds(), "kubectl-resync-s")
		b.ReportMetric(kResync.wall.Seconds()/dResync.wall.Seconds(), "resync-speedup-x")
		b.ReportMetric(float64(max(dCreate.maxRSSKiB, dResync.maxRSSKiB))/1024, "deputy-peak-MiB")
		b.ReportMetric(float64(max(kCreate.maxRSSKiB, kResync.maxRSSKiB))/1024, "kubectl-peak-MiB")
	}
}

// applyfloorResult is what test/load/applyfloor prints.
type applyfloorResult struct {
	Objects  int     `json:"objects"`
	Failed   int     `json:"failed"`
	Seconds  float64 `json:"seconds"`
	VmHWMKiB int64   `json:"vmhwm_kib"`
	Error    string  `json:"error"`
}

func parseApplyfloor(b *testing.B, r benchRun) applyfloorResult {
	b.Helper()
	var res applyfloorResult
	if err := json.Unmarshal(r.stdout, &res); err != nil || res.Objects != benchObjects || res.Failed != 0 {
		b.Fatalf("applyfloor: %v %+v\n%s", err, res, r.stdout)
	}
	return res
}

// profileAPIServer starts a CPU profile of kube-apiserver (its
// /debug/pprof/profile, as the admin) of the given length and returns the
// function that waits for it and writes it to file. (The handler cannot be
// stopped early: a cancelled request loses the profile.)
func profileAPIServer(b *testing.B, file string, seconds int) func() {
	b.Helper()
	done := make(chan error, 1)
	go func() {
		data, err := kubernetes.NewForConfigOrDie(cp.Admin).CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(seconds)).DoRaw(b.Context())
		if err == nil {
			err = os.WriteFile(file, data, 0o644)
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("kube-apiserver CPU profile: %v", err)
		}
	}
}

type syncbenchResult struct {
	Phase              string  `json:"phase"`
	Message            string  `json:"message"`
	Resources          int     `json:"resources"`
	Failed             int     `json:"failed"`
	Seconds            float64 `json:"seconds"`
	BeforeApplySeconds float64 `json:"before_apply_seconds"`
	VmHWMKiB           int64   `json:"vmhwm_kib"`
}

func parseSyncbench(b *testing.B, r benchRun) syncbenchResult {
	b.Helper()
	var res syncbenchResult
	if err := json.Unmarshal(r.stdout, &res); err != nil || res.Phase != v1alpha1.OperationSucceeded || res.Resources != benchObjects || res.Failed != 0 {
		b.Fatalf("deputy: %v %+v\n%s", err, res, r.stdout)
	}
	return res
}

// benchLogf writes a measurement to stderr as it is made (the testing
// package keeps only part of a benchmark's log).
func benchLogf(b *testing.B, format string, args ...any) {
	b.Helper()
	fmt.Fprintf(os.Stderr, "    %s\n", fmt.Sprintf(format, args...))
}

// benchRun is one measured process.
type benchRun struct {
	wall      time.Duration
	maxRSSKiB int64
	cpu       float64
	stdout    []byte
}

// runMeasured runs a process to completion and measures its wall time and
// peak resident memory: VmHWM of /proc/PID/status, sampled every 5ms while
// it runs. (wait4's ru_maxrss is no use here: a child forked from this test
// process starts out with the test process's resident set counted.)
func runMeasured(b *testing.B, bin string, args ...string) benchRun {
	b.Helper()
	cmd := exec.CommandContext(b.Context(), bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	peak := make(chan int64, 1)
	go func() {
		var hwm int64
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		for {
			if v := readVmHWM(status); v > hwm {
				hwm = v
			}
			select {
			case <-done:
				peak <- hwm
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	wall := time.Since(start)
	close(done)
	r := benchRun{wall: wall, stdout: out.Bytes(), maxRSSKiB: <-peak, cpu: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()}
	if err != nil {
		b.Fatalf("%s: %v\n%s", filepath.Base(bin), err, errb.String())
	}
	return r
}

// processCPU sums user+system CPU seconds of the running processes whose
// command name is one of names (kube-apiserver, etcd, deputy), by name.
func processCPU(names ...string) map[string]float64 {
	out := map[string]float64{}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(data)
		open, closeIdx := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closeIdx < 0 {
			continue
		}
		comm := s[open+1 : closeIdx]
		if !want[comm] {
			continue
		}
		f := strings.Fields(s[closeIdx+2:])
		if len(f) < 13 {
			continue
		}
		var ut, st float64
		_, _ = fmt.Sscanf(f[11], "%f", &ut)
		_, _ = fmt.Sscanf(f[12], "%f", &st)
		out[comm] += (ut + st) / 100 // clock ticks (USER_HZ = 100)
	}
	return out
}

func cpuDelta(before, after map[string]float64) string {
	var parts []string
	for _, n := range []string{"kube-apiserver", "etcd", "deputy"} {
		parts = append(parts, fmt.Sprintf("%s %.2fs", n, after[n]-before[n]))
	}
	return strings.Join(parts, ", ")
}

// readVmHWM reads the peak resident set (KiB) from a /proc status file; 0
// when the process is gone.
func readVmHWM(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var n int64
			_, _ = fmt.Sscanf(strings.TrimSpace(v), "%d", &n)
			return n
		}
	}
	return 0
}

func benchCreate(b *testing.B, f func() error) {
	b.Helper()
	if err := f(); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
}

func benchToken(b *testing.B, cs *kubernetes.Clientset, ns, name string) string {
	b.Helper()
	benchCreate(b, func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(b.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	})
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(b.Context(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return tr.Status.Token
}

// benchRepo writes benchObjects ConfigMaps, one per file, and commits them.
func benchRepo(b *testing.B, dir string) {
	b.Helper()
	r, err := git.PlainInit(dir, false)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "cms"), 0o755); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < benchObjects; i++ {
		name := fmt.Sprintf("cm-%04d", i)
		body := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  labels:\n    app: bench\ndata:\n  index: \"%d\"\n  greeting: hello from %s\n", name, i, name)
		if err := os.WriteFile(filepath.Join(dir, "cms", name+".yaml"), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	wt, err := r.Worktree()
	if err != nil {
		b.Fatal(err)
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		b.Fatal(err)
	}
	if _, err := wt.Commit("bench", &git.CommitOptions{Author: &object.Signature{Name: "bench", Email: "bench@example.com", When: time.Now()}}); err != nil {
		b.Fatal(err)
	}
}

// benchWaitForGate waits until deputy's gate lets the controller
// impersonate the ServiceAccount.
func benchWaitForGate(b *testing.B, token, saUser string) {
	b.Helper()
	c := cp.TokenConfig(token)
	c.Impersonate = rest.ImpersonationConfig{UserName: saUser}
	cs := kubernetes.NewForConfigOrDie(c)
	ctx, cancel := context.WithTimeout(b.Context(), 45*time.Second)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if _, err = cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "bench-x"}},
		}, metav1.CreateOptions{}); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	b.Fatalf("the gate does not let the controller impersonate %s: %v", saUser, err)
}

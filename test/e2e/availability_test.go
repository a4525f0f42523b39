package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/manifests"
	"deputy.dev/deputy/test/framework"
	"deputy.dev/deputy/test/framework/svcproxy"
)

// Availability (issue 12, items 1 and 2): kube-apiserver runs with the
// AuthorizationConfiguration `deputy config apiserver` generates (Node, the
// impersonation webhook with failurePolicy Deny, the webhook for everything
// else with NoOpinion, RBAC). TestAvailability stops the suite's main deputy,
// checks what keeps working and what stays closed, starts deputy again in
// cluster mode as its own ServiceAccount, then runs two replicas behind a
// stand-in for their Service and stops one under review traffic. The main
// deputy is started again, as it was, when the test ends.

const (
	availNS        = "e2e-availability"
	availLabel     = "e2e.deputy.dev/availability"
	availImpRole   = "e2e-availability-impersonate"
	availTargetSA  = "target"
	availAliceNS   = "team-a" // alice may list pods there by deputy's policy only (testdata/policy)
	availLeaseName = "deputy-sync"
)

// availabilityEnv holds the identities of the test: client-certificate
// users (authenticated by kube-apiserver itself, so they work while deputy,
// the token webhook, is down).
type availabilityEnv struct {
	admin *kubernetes.Clientset
	// bob may read ConfigMaps in availNS by RBAC.
	bob *kubernetes.Clientset
	// carol holds RBAC's blanket impersonate on users, groups,
	// ServiceAccounts, uids and extras: only deputy's gate stops her.
	carol *rest.Config
	// alice may list pods in team-a by deputy's policy alone.
	alice *kubernetes.Clientset
	// The control plane and a kubelet, as kube-apiserver sees them.
	scheduler, controllerManager, kubelet *kubernetes.Clientset
	anonymous                             *http.Client

	// deputy as its ServiceAccount (manifests/base/rbac.yaml).
	saKubeconfig string
	dir          string
}

func TestAvailability(t *testing.T) {
	env := newAvailabilityEnv(t)
	// Whatever happens below, the suite's main deputy answers kube-apiserver
	// again afterwards (registered first, so it runs last).
	t.Cleanup(func() { restoreDeputy(t) })

	t.Run("with deputy stopped, the control plane stays up and impersonation stays denied", func(t *testing.T) {
		env.checkGateUp(t)
		if err := deputy.Stop(); err != nil {
			t.Fatalf("stopping deputy: %v", err)
		}
		if !deputy.Exited() {
			t.Fatal("deputy still runs")
		}
		// kube-apiserver caches deputy's answers for 1s (main_test.go).
		time.Sleep(1500 * time.Millisecond)
		env.checkDeputyDown(t)
	})

	t.Run("deputy starts again in cluster mode as its ServiceAccount and serves, with no manual step", func(t *testing.T) {
		before := webhookEvaluations(t)
		start := time.Now()
		d := env.startReplica(t, "avail-cold", deputy.Port)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := d.WaitReady(ctx); err != nil {
			t.Fatalf("%v\n%s", err, tail(d.Logs(), 60))
		}
		t.Logf("deputy was ready %s after its start, with deputy's webhooks unreachable until then", time.Since(start).Round(time.Millisecond))
		after := webhookEvaluations(t)
		for _, name := range []string{manifests.AuthorizerName, manifests.ImpersonationAuthorizerName} {
			if after[name] != before[name] {
				t.Errorf("kube-apiserver called webhook %s %v times while deputy started: deputy's own requests must not wait for deputy",
					name, after[name]-before[name])
			}
		}
		if strings.Contains(strings.ToLower(d.Logs()), "forbidden") {
			t.Errorf("deputy was refused something as its ServiceAccount:\n%s", tail(d.Logs(), 60))
		}
		env.checkGateUp(t)
		if err := d.Stop(); err != nil {
			t.Errorf("stopping deputy: %v", err)
		}
	})

	t.Run("SIGTERM to one of two replicas behind a Service under review traffic fails no review", func(t *testing.T) {
		env.rollingStop(t)
	})
}

func newAvailabilityEnv(t *testing.T) *availabilityEnv {
	t.Helper()
	ctx := t.Context()
	admin := rest.CopyConfig(cp.Admin)
	admin.QPS, admin.Burst = 500, 1000 // the review traffic
	env := &availabilityEnv{admin: kubernetes.NewForConfigOrDie(admin), dir: t.TempDir()}
	labels := map[string]string{availLabel: "true"}
	if _, err := env.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: availNS, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rbac := env.admin.RbacV1()
	t.Cleanup(func() {
		ctx := context.Background()
		_ = rbac.ClusterRoleBindings().Delete(ctx, availImpRole, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(ctx, availImpRole, metav1.DeleteOptions{})
		_ = env.admin.CoreV1().Namespaces().Delete(ctx, availNS, metav1.DeleteOptions{})
	})
	if _, err := rbac.Roles(availNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(availNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bob"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmap-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "avail-bob"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// carol: what the built-in edit role grants on ServiceAccounts, and
	// more, all without resourceNames.
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: availImpRole, Labels: labels},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"uids", "userextras/scopes"}, Verbs: []string{"impersonate"}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: availImpRole, Labels: labels},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: availImpRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "avail-carol"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	user := func(name string, groups ...string) *rest.Config {
		u, err := cp.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := u.Config()
		cfg.QPS, cfg.Burst = 200, 400
		return cfg
	}
	env.bob = kubernetes.NewForConfigOrDie(user("avail-bob"))
	env.carol = user("avail-carol")
	env.alice = kubernetes.NewForConfigOrDie(user("alice"))
	env.scheduler = kubernetes.NewForConfigOrDie(user("system:kube-scheduler"))
	env.controllerManager = kubernetes.NewForConfigOrDie(user("system:kube-controller-manager"))
	env.kubelet = kubernetes.NewForConfigOrDie(user("system:node:avail-node", "system:nodes"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.Admin.CAData)
	env.anonymous = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}

	// deputy's identity and RBAC as manifests/base grants them (the attack
	// suite applies the same file: both leave it, and deputy-system, for the
	// other tests).
	if _, err := env.admin.CoreV1().Namespaces().Get(ctx, deputyNamespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := env.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: deputyNamespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rbacFile := repoPath("manifests", "base", "rbac.yaml")
	if out, stderr, err := cp.Kubectl(ctx, nil, "apply", "-f", rbacFile); err != nil {
		t.Fatalf("kubectl apply -f %s: %v\n%s%s", rbacFile, err, out, stderr)
	}
	token, err := saToken(ctx, deputyNamespace, "deputy")
	if err != nil {
		t.Fatal(err)
	}
	env.saKubeconfig = filepath.Join(env.dir, "deputy.kubeconfig")
	if err := cp.WriteTokenKubeconfig(env.saKubeconfig, token); err != nil {
		t.Fatal(err)
	}
	return env
}

// checkGateUp: deputy answers. The strict gate denies carol with its reason
// and deputy's policy lets alice list pods.
func (env *availabilityEnv) checkGateUp(t *testing.T) {
	t.Helper()
	eventuallyWithin(t, "deputy answers kube-apiserver", 10*time.Second, func() error {
		_, err := env.impersonating(rest.ImpersonationConfig{UserName: "system:serviceaccount:" + availNS + ":" + availTargetSA}).
			CoreV1().ConfigMaps(availNS).List(t.Context(), metav1.ListOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "deputy impersonation gate") {
			return fmt.Errorf("carol impersonating a ServiceAccount: %v, want Forbidden by the gate", err)
		}
		if _, err := env.alice.CoreV1().Pods(availAliceNS).List(t.Context(), metav1.ListOptions{}); err != nil {
			return fmt.Errorf("alice listing pods in %s (deputy's policy allows it): %v", availAliceNS, err)
		}
		return nil
	})
}

func (env *availabilityEnv) impersonating(imp rest.ImpersonationConfig) *kubernetes.Clientset {
	cfg := rest.CopyConfig(env.carol)
	cfg.Impersonate = imp
	return kubernetes.NewForConfigOrDie(cfg)
}

// checkDeputyDown: deputy is stopped (its address refuses connections).
func (env *availabilityEnv) checkDeputyDown(t *testing.T) {
	ctx := t.Context()
	before := webhookEvaluations(t)
	start := time.Now()
	t.Run("kube-apiserver's health and version endpoints answer anonymous callers without deputy", func(t *testing.T) {
		// RBAC's system:public-info-viewer allows the first four to
		// everyone; a single check below /readyz is for system:monitoring.
		for p, want := range map[string]int{"/livez": 200, "/readyz": 200, "/healthz": 200, "/version": 200, "/readyz/etcd": 403} {
			resp, err := env.anonymous.Get(strings.TrimSuffix(cp.Admin.Host, "/") + p)
			if err != nil {
				t.Fatalf("GET %s: %v", p, err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("anonymous GET %s: %d, want %d", p, resp.StatusCode, want)
			}
		}
	})
	t.Run("the control plane and kubelets keep their access", func(t *testing.T) {
		if _, err := env.scheduler.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("kube-scheduler listing pods: %v", err)
		}
		if _, err := env.controllerManager.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("kube-controller-manager listing pods: %v", err)
		}
		if _, err := env.kubelet.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("a kubelet listing services (Node authorizer): %v", err)
		}
	})
	t.Logf("health, version, control plane and kubelet requests took %s in all", time.Since(start).Round(time.Millisecond))
	t.Run("none of them was sent to deputy", func(t *testing.T) {
		after := webhookEvaluations(t)
		for _, name := range []string{manifests.AuthorizerName, manifests.ImpersonationAuthorizerName} {
			if after[name] != before[name] {
				t.Errorf("kube-apiserver called webhook %s %v times", name, after[name]-before[name])
			}
		}
	})

	t.Run("an ordinary user's request that RBAC allows works", func(t *testing.T) {
		before := webhookEvaluations(t)
		if _, err := env.bob.CoreV1().ConfigMaps(availNS).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("bob listing ConfigMaps (RBAC allows it): %v", err)
		}
		// It went to deputy, failed, and RBAC decided (failurePolicy NoOpinion).
		if after := webhookEvaluations(t); after[manifests.AuthorizerName] <= before[manifests.AuthorizerName] {
			t.Errorf("bob's request was not sent to webhook %s", manifests.AuthorizerName)
		}
		// What only deputy allows is not allowed meanwhile.
		_, err := env.alice.CoreV1().Pods(availAliceNS).List(ctx, metav1.ListOptions{})
		if err == nil {
			t.Errorf("alice listed pods in %s with deputy down: only deputy's policy allows it", availAliceNS)
		}
		t.Logf("alice, allowed by deputy's policy alone, while deputy is down: %v", err)
	})

	t.Run("every impersonation is denied, whatever RBAC grants", func(t *testing.T) {
		for _, imp := range []rest.ImpersonationConfig{
			{UserName: "system:serviceaccount:" + availNS + ":" + availTargetSA},
			{UserName: "dave"},
			{UserName: "dave", Groups: []string{"team-d"}},
			{UserName: "dave", UID: "1234"},
			{UserName: "dave", Extra: map[string][]string{"scopes": {"view"}}},
			{UserName: "system:node:avail-node"},
		} {
			_, err := env.impersonating(imp).CoreV1().ConfigMaps(availNS).List(ctx, metav1.ListOptions{})
			if !apierrors.IsForbidden(err) {
				t.Errorf("carol impersonating %+v: %v, want Forbidden", imp, err)
			}
		}
		// The same reviewed by kube-apiserver: denied, with the webhook's
		// error as evaluation error.
		st := reviewSAR(t, env.admin, "avail-carol", &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: availNS, Name: availTargetSA})
		if st.Allowed || !st.Denied || st.EvaluationError == "" {
			t.Errorf("SubjectAccessReview of carol's impersonation: %+v, want denied with an evaluation error", st)
		}
	})
}

// reviewSAR creates a SubjectAccessReview as the admin and returns its status.
func reviewSAR(t *testing.T, cs *kubernetes.Clientset, user string, ra *authorizationv1.ResourceAttributes) authorizationv1.SubjectAccessReviewStatus {
	t.Helper()
	r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"}, ResourceAttributes: ra}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return r.Status
}

var webhookEvaluationLine = regexp.MustCompile(`^apiserver_authorization_webhook_evaluations_total\{.*name="([^"]+)".*\} (\S+)$`)

// webhookEvaluations returns kube-apiserver's count of calls to each
// authorization webhook (apiserver_authorization_webhook_evaluations_total,
// every result), by webhook name.
func webhookEvaluations(t *testing.T) map[string]float64 {
	t.Helper()
	data, err := kubernetes.NewForConfigOrDie(cp.Admin).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("kube-apiserver /metrics: %v", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		if m := webhookEvaluationLine.FindStringSubmatch(sc.Text()); m != nil {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", sc.Text(), err)
			}
			out[m[1]] += v
		}
	}
	return out
}

// replicaConfig is the e2e DeputyConfiguration for a deputy running as its
// ServiceAccount: the Lease of manifests/base (the Role grants only that
// one), identity per replica, a short Lease, shutdown.delay so that a
// Service stops sending new connections before deputy stops answering, and
// a Git cache under the test's directory.
func (env *availabilityEnv) replicaConfig(t *testing.T, identity string) string {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(deputyConfig(true)), &cfg); err != nil {
		t.Fatal(err)
	}
	sync := cfg["sync"].(map[string]any)
	sync["leaderElection"] = map[string]any{"leaseNamespace": deputyNamespace, "leaseName": availLeaseName, "identity": identity,
		"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "500ms"}
	sync["cacheDir"] = filepath.Join(env.dir, "cache-"+identity)
	cfg["shutdown"] = map[string]any{"delay": "2s", "gracePeriod": "10s"}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(env.dir, identity+".yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// startReplica starts deputy in cluster mode as deputy-system/deputy on port
// (0: a free one) and stops it when the test ends.
func (env *availabilityEnv) startReplica(t *testing.T, identity string, port int) *framework.Deputy {
	t.Helper()
	args := append(fileModeArgs(), "--config", env.replicaConfig(t, identity), "--kubeconfig", env.saKubeconfig)
	d, err := framework.StartDeputy(framework.DeputyOptions{Bin: deputy.Bin, CertDir: deputy.CertDir, Port: port, Args: args,
		Env: []string{"POD_NAMESPACE=" + deputyNamespace}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Stop()
		if t.Failed() {
			t.Logf("replica %s log (tail):\n%s", identity, tail(d.Logs(), 40))
		}
	})
	return d
}

// reviewTraffic sends SubjectAccessReviews through kube-apiserver from
// workers until ctx ends: as the admin, for alice (deputy's policy allows
// her: the webhook for everything else) and for carol's impersonation (the
// gate denies it: the impersonation webhook); and as bob, a
// SelfSubjectAccessReview RBAC allows (deputy has no opinion). Each has a
// fresh resource name, so kube-apiserver's webhook cache never answers. A
// review fails when its answer is not deputy's: an error, an evaluation
// error (the webhook failed), or another decision.
type reviewTraffic struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string
}

func (r *reviewTraffic) fail(format string, args ...any) {
	r.failed.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failures) < 10 {
		r.failures = append(r.failures, fmt.Sprintf(format, args...))
	}
}

func (env *availabilityEnv) runTraffic(ctx context.Context, workers int) (*reviewTraffic, *sync.WaitGroup) {
	r := &reviewTraffic{}
	var n atomic.Int64
	var wg sync.WaitGroup
	sars := env.admin.AuthorizationV1().SubjectAccessReviews()
	ssars := env.bob.AuthorizationV1().SelfSubjectAccessReviews()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := n.Add(1)
				name := "review-" + strconv.FormatInt(i, 10)
				// A review in flight when the test stops the traffic is not
				// counted either way.
				call := context.WithoutCancel(ctx)
				switch i % 3 {
				case 0:
					res, err := sars.Create(call, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice",
						Groups: []string{"system:authenticated"}, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: availAliceNS, Name: name}}}, metav1.CreateOptions{})
					switch {
					case err != nil:
						r.fail("alice: %v", err)
					case !res.Status.Allowed || res.Status.EvaluationError != "":
						r.fail("alice: %+v, want allowed by deputy", res.Status)
					default:
						r.ok.Add(1)
					}
				case 1:
					res, err := sars.Create(call, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "avail-carol",
						Groups: []string{"system:authenticated"}, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: availNS, Name: name}}}, metav1.CreateOptions{})
					switch {
					case err != nil:
						r.fail("carol: %v", err)
					case !res.Status.Denied || res.Status.EvaluationError != "" || !strings.Contains(res.Status.Reason, "deputy impersonation gate"):
						r.fail("carol: %+v, want denied by the gate", res.Status)
					default:
						r.ok.Add(1)
					}
				default:
					res, err := ssars.Create(call, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
						ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: availNS, Name: name}}}, metav1.CreateOptions{})
					switch {
					case err != nil:
						r.fail("bob: %v", err)
					case !res.Status.Allowed || res.Status.EvaluationError != "":
						r.fail("bob: %+v, want allowed by RBAC after deputy's no opinion", res.Status)
					default:
						r.ok.Add(1)
					}
				}
			}
		})
	}
	return r, &wg
}

// rollingStop runs two replicas behind a Service stand-in on the address
// kube-apiserver calls, and sends one of them SIGTERM under review traffic.
//
// The stand-in (svcproxy) is what kube-proxy and the EndpointSlice
// controller do for a Service with a readinessProbe on /readyz: new
// connections go to ready replicas only, open ones stay. On SIGTERM deputy
// turns /readyz red at once and keeps serving for shutdown.delay (2s here;
// 5s in manifests/base), longer than the probe period (200ms), so no new
// connection reaches it after its endpoint is gone; then it drains: its
// HTTP/2 connections with kube-apiserver get GOAWAY, in-flight reviews
// finish, and kube-apiserver opens a new connection, to the other replica.
func (env *availabilityEnv) rollingStop(t *testing.T) {
	a := env.startReplica(t, "avail-a", 0)
	b := env.startReplica(t, "avail-b", 0)
	caPEM, err := os.ReadFile(filepath.Join(deputy.CertDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	// kube-apiserver calls deputy.URL: the Service's address.
	proxy, err := svcproxy.Start(svcproxy.Options{Listen: "127.0.0.1:" + strconv.Itoa(deputy.Port),
		Backends: []string{"127.0.0.1:" + strconv.Itoa(a.Port), "127.0.0.1:" + strconv.Itoa(b.Port)},
		TLS:      &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ProbePeriod: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := proxy.WaitReady(ctx); err != nil {
		t.Fatalf("%v\nreplica a:\n%s\nreplica b:\n%s", err, tail(a.Logs(), 30), tail(b.Logs(), 30))
	}
	env.checkGateUp(t)

	trafficCtx, stopTraffic := context.WithCancel(t.Context())
	defer stopTraffic()
	traffic, wg := env.runTraffic(trafficCtx, 6)
	time.Sleep(2 * time.Second)
	if traffic.ok.Load() == 0 {
		stopTraffic()
		wg.Wait()
		t.Fatalf("no review succeeded before the stop: %v", traffic.failures)
	}
	// Stop the replica kube-apiserver is connected to (the one with open
	// connections; kube-apiserver keeps its HTTP/2 connection).
	stats := proxy.Stats()
	victim, survivor, vi := a, b, 0
	if stats[1].Active > stats[0].Active {
		victim, survivor, vi = b, a, 1
	}
	if stats[vi].Active == 0 {
		t.Fatalf("kube-apiserver holds no connection to either replica: %+v", stats)
	}
	before := traffic.ok.Load()
	sigterm := time.Now()
	if err := victim.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := victim.Wait(30 * time.Second); err != nil {
		t.Errorf("the stopped replica: %v", err)
	}
	exited := time.Since(sigterm)
	during := traffic.ok.Load() - before
	time.Sleep(2 * time.Second) // traffic on the survivor alone
	stopTraffic()
	wg.Wait()
	after := proxy.Stats()
	t.Logf("reviews: %d answered as deputy answers, %d failed; %d answered between SIGTERM and exit (%s); connections %+v",
		traffic.ok.Load(), traffic.failed.Load(), during, exited.Round(time.Millisecond), after)
	if n := traffic.failed.Load(); n > 0 {
		t.Errorf("%d reviews failed; first ones:\n%s", n, strings.Join(traffic.failures, "\n"))
	}
	if exited < 2*time.Second {
		t.Errorf("the replica exited %s after SIGTERM, before its shutdown.delay (2s) ended", exited)
	}
	if during == 0 {
		t.Errorf("no review was answered while the replica was stopping")
	}
	if after[1-vi].Active == 0 && after[1-vi].Total == stats[1-vi].Total {
		t.Errorf("kube-apiserver did not move to the other replica: before %+v, after %+v", stats, after)
	}
	if strings.Contains(strings.ToLower(survivor.Logs()), "forbidden") {
		t.Errorf("the remaining replica was refused something:\n%s", tail(survivor.Logs(), 40))
	}
}

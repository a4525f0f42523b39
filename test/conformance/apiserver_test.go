package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/test/framework"
)

// Sizes of the real-apiserver run, from the environment: CONFORMANCE_SARS
// SubjectAccessReviews in all, spread over CONFORMANCE_SEEDS seeds starting
// at CONFORMANCE_SEED. `make test` runs the defaults; `make conformance`
// at least 20,000 over 5 seeds.
const (
	defaultSARs  = 2000
	defaultSeeds = 2
	// concurrency bounds the SubjectAccessReviews in flight to each side.
	concurrency = 16
)

// Generated objects per seed, besides the bootstrap policy (about 70
// ClusterRoles, 50 ClusterRoleBindings and a dozen namespaced objects).
var apiserverOptions = Options{
	Valid:               true,
	Namespaces:          4,
	ClusterRoles:        40,
	Roles:               30,
	ClusterRoleBindings: 60,
	RoleBindings:        80,
	Aggregating:         3,
}

// deputyConfig turns deputy's impersonation gate into a bystander: it
// departs from RBAC on purpose (impersonation only through rules naming the
// target, protected targets), has its own tests, and is not what this
// conformance run measures. With strict off and no protected targets it has
// no opinion on anyone but its impersonators (deputy's own ServiceAccount,
// which the generator never uses), so /authorize answers what the RBAC
// evaluator decides.
const deputyConfig = `apiVersion: config.deputy.dev/v1alpha1
kind: DeputyConfiguration
authorization:
  impersonation:
    strict: false
    protectedTargets: {groups: [], userPrefixes: [], serviceAccountNamespaces: []}
`

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

// TestAPIServerConformance asks kube-apiserver v1.37.2 (RBAC authorization
// only) and deputy the same SubjectAccessReviews about the same policy and
// requires the same answers.
//
// Per seed: a fresh kube-apiserver + etcd; a random policy and the named
// regression cases are created through the API; kube-controller-manager's
// ClusterRole aggregation controller runs against it until the aggregated
// rules settle (envtest runs no controller-manager); sentinel bindings,
// created last, tell when the apiserver's RBAC informers have caught up;
// then everything RBAC the apiserver holds — its bootstrap policy included —
// is read back and written as deputy's --policy, and a deputy process serves
// it (deputy aggregates again, so the run also compares its aggregation with
// the controller's). Requests go to the apiserver's SubjectAccessReview API
// (v1) and to deputy's /authorize (v1, or v1beta1 for a fifth of them).
//
// A mismatch is a different `allowed`, or an allow whose reason is not one
// the policy can give. kube-apiserver visits bindings in its informer's map
// order, so where several bindings allow, the reason legitimately varies:
// both reasons are checked against the set computed with upstream's
// authorizer on each binding separately (Reference). Beyond the issue's
// definition the run also checks that the answers where nothing allows name
// the same missing roles (the apiserver in its reason, deputy in its reason
// and its evaluationError).
func TestAPIServerConformance(t *testing.T) {
	// envtest logs through controller-runtime's logger, which otherwise
	// complains, with a stack trace, that it was never set.
	ctrllog.SetLogger(logr.Discard())
	sars := envInt(t, "CONFORMANCE_SARS", defaultSARs)
	seeds := envInt(t, "CONFORMANCE_SEEDS", defaultSeeds)
	first := envInt(t, "CONFORMANCE_SEED", 1)

	assets, err := framework.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := framework.DeputyBinary()
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(t.TempDir(), "certs")
	if _, err := framework.CLI(bin, "certs", "init", "--dir", certDir, "--hosts", "127.0.0.1,localhost"); err != nil {
		t.Fatal(err)
	}

	var total runStats
	start := time.Now()
	for i := range seeds {
		seed := uint64(first + i)
		n := sars / seeds
		if i < sars%seeds {
			n++
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s := runSeed(t, seedRun{seed: seed, sars: n, assets: assets, deputyBin: bin, certDir: certDir})
			total.add(s)
		})
	}
	t.Logf("TOTAL: %d seeds (%d..%d), %s, in %s", seeds, first, first+seeds-1, total, time.Since(start).Round(time.Second))
}

type seedRun struct {
	seed      uint64
	sars      int
	assets    string
	deputyBin string
	certDir   string
}

type runStats struct {
	sars, named, allowed, severalAllow, reasonsDiffered, missingRoleErrors, mismatches, otherDisagreements int
}

func (s *runStats) add(o runStats) {
	s.sars += o.sars
	s.named += o.named
	s.allowed += o.allowed
	s.severalAllow += o.severalAllow
	s.reasonsDiffered += o.reasonsDiffered
	s.missingRoleErrors += o.missingRoleErrors
	s.mismatches += o.mismatches
	s.otherDisagreements += o.otherDisagreements
}

func (s runStats) String() string {
	return fmt.Sprintf("%d SARs (%d from named cases): %d allowed, %d of them by several bindings (%d answered with different, equally valid reasons); %d no opinion naming missing roles; %d mismatches, %d other disagreements",
		s.sars, s.named, s.allowed, s.severalAllow, s.reasonsDiffered, s.missingRoleErrors, s.mismatches, s.otherDisagreements)
}

// seedPolicy is a kube-apiserver (RBAC authorization only) holding a
// generated policy, and that policy as written for deputy.
type seedPolicy struct {
	cs kubernetes.Interface
	// held is every RBAC object the apiserver holds, its bootstrap policy
	// included, read back after aggregation; policyDir holds it as a policy
	// file.
	held      *Policy
	policyDir string
	// r continues the seed's random source (for the requests).
	r     *rand.Rand
	named []namedCheck
}

// setupSeedPolicy starts a fresh kube-apiserver + etcd (stopped when the test
// ends), creates the seed's generated policy and the named cases kube-apiserver
// accepts, runs the ClusterRole aggregation controller until it settles, waits
// for the RBAC informers (sentinels), and reads everything back.
func setupSeedPolicy(t *testing.T, seed uint64, assets string) seedPolicy {
	ctx := t.Context()
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	env.ControlPlane.GetAPIServer().Configure().Set("authorization-mode", "RBAC")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("failed to start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs := kubernetes.NewForConfigOrDie(cfg)
	if err := waitReady(ctx, cs); err != nil {
		t.Fatal(err)
	}

	// The policy: generated objects plus the named cases kube-apiserver accepts.
	bootstrap, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts := apiserverOptions
	for _, cr := range bootstrap.Items {
		opts.KnownClusterRoles = append(opts.KnownClusterRoles, cr.Name)
	}
	r := rand.New(rand.NewPCG(seed, 0xdeb))
	generated := GeneratePolicy(r, opts)
	var named []namedCheck
	for _, c := range namedCases() {
		if c.apiserver {
			generated.merge(c.policy)
			named = append(named, c.checks...)
		}
	}
	if err := create(ctx, cs, generated); err != nil {
		t.Fatal(err)
	}
	if err := aggregate(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := createSentinels(ctx, cs, generated.Namespaces[0]); err != nil {
		t.Fatal(err)
	}
	held, err := readBack(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	held.Namespaces = generated.Namespaces
	policyDir := t.TempDir()
	if err := held.WriteFile(policyDir, "policy.yaml"); err != nil {
		t.Fatal(err)
	}
	return seedPolicy{cs: cs, held: held, policyDir: policyDir, r: r, named: named}
}

func runSeed(t *testing.T, run seedRun) runStats {
	ctx := t.Context()
	t0 := time.Now()
	sp := setupSeedPolicy(t, run.seed, run.assets)
	cs, held, policyDir, r, named := sp.cs, sp.held, sp.policyDir, sp.r, sp.named
	configFile := filepath.Join(t.TempDir(), "deputy.yaml")
	if err := os.WriteFile(configFile, []byte(deputyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	setup := time.Since(t0)
	aggregated, err := checkAggregation(policyDir, held)
	if err != nil {
		t.Error(err)
	}

	deputy, err := framework.StartDeputy(framework.DeputyOptions{Bin: run.deputyBin, CertDir: run.certDir,
		Args: []string{"--config", configFile, "--policy", policyDir, "--log-level", "info"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deputy.Stop() })
	if err := deputy.WaitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, deputy.Logs())
	}
	client, err := deputy.Client(true)
	if err != nil {
		t.Fatal(err)
	}

	reqs := GenerateRequests(r, held, run.sars-len(named))
	for _, c := range named {
		reqs = append(reqs, c.req)
	}
	t1 := time.Now()
	answers, err := askBoth(ctx, cs, func(req Request) (sarAnswer, error) {
		return askDeputy(client.Do, deputy.URL+"/authorize", req)
	}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	asking := time.Since(t1)

	ref := NewReference(held)
	var s runStats
	s.sars, s.named = len(reqs), len(named)
	failures := 0
	report := func(format string, args ...any) {
		failures++
		if failures <= 20 {
			t.Errorf(format, args...)
		}
	}
	for i, req := range reqs {
		attrs, err := Attributes(req.Spec)
		if err != nil {
			t.Fatal(err)
		}
		e := ref.Expect(attrs)
		api, dep := answers[i].apiserver, answers[i].deputy
		mismatch := api.Allowed != dep.Allowed
		if e.Allowed {
			s.allowed++
			if len(e.Reasons) > 1 {
				s.severalAllow++
			}
			if api.Allowed && dep.Allowed && api.Reason != dep.Reason {
				s.reasonsDiffered++
			}
		} else if len(e.Errors) > 0 {
			s.missingRoleErrors++
		}
		errAPI := e.CheckAnswer(api.answer().decision, api.Reason, nil)
		errDeputy := e.CheckAnswer(dep.answer().decision, dep.Reason, &dep.EvaluationError)
		if api.Allowed && !e.Reasons[api.Reason] || dep.Allowed && !e.Reasons[dep.Reason] {
			mismatch = true
		}
		if mismatch {
			s.mismatches++
		} else if errAPI != nil || errDeputy != nil {
			s.otherDisagreements++
		}
		if mismatch || errAPI != nil || errDeputy != nil {
			report("%s\n  kube-apiserver: %s\n  deputy:         %s\n  reference:      %s\n  apiserver vs reference: %v\n  deputy vs reference: %v",
				req, api, dep, e, errAPI, errDeputy)
		}
		if j := i - (len(reqs) - len(named)); j >= 0 {
			c := named[j]
			if err := c.checkAnswer(api.answer(), nil); err != nil {
				report("named case %s: kube-apiserver: %v", req, err)
			}
			if err := c.checkAnswer(dep.answer(), &dep.EvaluationError); err != nil {
				report("named case %s: deputy: %v", req, err)
			}
		}
	}
	if failures > 20 {
		t.Errorf("… and %d more", failures-20)
	}
	roles, clusterRoles, roleBindings, clusterRoleBindings := len(held.Roles), len(held.ClusterRoles), len(held.RoleBindings), len(held.ClusterRoleBindings)
	t.Logf("seed %d: policy of %d ClusterRoles (%s), %d Roles, %d ClusterRoleBindings, %d RoleBindings (bootstrap included); setup %s, asking both %s; %s",
		run.seed, clusterRoles, aggregated, roles, clusterRoleBindings, roleBindings, setup.Round(time.Millisecond), asking.Round(time.Millisecond), s)
	return s
}

// waitReady polls /readyz: the RBAC bootstrap post-start hook must have run.
func waitReady(ctx context.Context, cs kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready: %v (%s)", err, body)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// create creates p's namespaces and objects through the API.
func create(ctx context.Context, cs kubernetes.Interface, p *Policy) error {
	rbac := cs.RbacV1()
	for _, ns := range p.Namespaces {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create namespace %s: %w", ns, err)
		}
	}
	o := metav1.CreateOptions{FieldValidation: "Strict"}
	for _, x := range p.ClusterRoles {
		if _, err := rbac.ClusterRoles().Create(ctx, x, o); err != nil {
			return fmt.Errorf("failed to create ClusterRole %s: %w", x.Name, err)
		}
	}
	for _, x := range p.Roles {
		if _, err := rbac.Roles(x.Namespace).Create(ctx, x, o); err != nil {
			return fmt.Errorf("failed to create Role %s/%s: %w", x.Namespace, x.Name, err)
		}
	}
	for _, x := range p.ClusterRoleBindings {
		if _, err := rbac.ClusterRoleBindings().Create(ctx, x, o); err != nil {
			return fmt.Errorf("failed to create ClusterRoleBinding %s: %w", x.Name, err)
		}
	}
	for _, x := range p.RoleBindings {
		if _, err := rbac.RoleBindings(x.Namespace).Create(ctx, x, o); err != nil {
			return fmt.Errorf("failed to create RoleBinding %s/%s: %w", x.Namespace, x.Name, err)
		}
	}
	return nil
}

// aggregationSettle is how long the ClusterRoles must stay unchanged for the
// aggregation controller to count as done.
const aggregationSettle = 3 * time.Second

// The bootstrap ClusterRoles the aggregation controller always writes (they
// start without rules and select roles that have some), and the field
// manager it writes them with.
var bootstrapAggregated = map[string]bool{"admin": true, "edit": true, "view": true}

const aggregationFieldManager = "clusterrole-aggregation-controller"

// aggregate runs kube-controller-manager's ClusterRole aggregation
// controller (pkg/controller/clusterroleaggregation) until it has written the
// bootstrap aggregated roles and no ClusterRole has changed for
// aggregationSettle since.
func aggregate(ctx context.Context, cs kubernetes.Interface) error {
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logr.Discard()))
	defer cancel()
	factory := informers.NewSharedInformerFactory(cs, 0)
	ctrl := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), cs.RbacV1())
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() { ctrl.Run(ctx, 2) })
	defer func() {
		cancel()
		wg.Wait()
		factory.Shutdown()
	}()
	deadline := time.Now().Add(2 * time.Minute)
	last, since := "", time.Now()
	for time.Now().Before(deadline) {
		list, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var versions []string
		written := 0
		for _, cr := range list.Items {
			versions = append(versions, cr.Name+"@"+cr.ResourceVersion)
			if bootstrapAggregated[cr.Name] && slices.ContainsFunc(cr.ManagedFields, func(f metav1.ManagedFieldsEntry) bool {
				return f.Manager == aggregationFieldManager
			}) {
				written++
			}
		}
		fingerprint := strings.Join(versions, ",")
		if fingerprint != last {
			last, since = fingerprint, time.Now()
		} else if written == len(bootstrapAggregated) && time.Since(since) >= aggregationSettle {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return errors.New("the ClusterRole aggregation did not settle within 2 minutes")
}

// checkAggregation loads the policy directory as deputy does (policy.Load,
// which computes aggregationRules itself) and compares every aggregated
// ClusterRole with what kube-controller-manager's controller wrote: the same
// rules, as a set (their order never changes a decision), and says whether
// the order is the same too.
func checkAggregation(dir string, held *Policy) (string, error) {
	files, err := readPolicyDir(dir)
	if err != nil {
		return "", err
	}
	snap, err := policy.Load(files)
	if err != nil {
		return "", fmt.Errorf("deputy's loader rejects what kube-apiserver holds: %w", err)
	}
	var n, rules, reordered int
	var errs []error
	for _, cr := range held.ClusterRoles {
		if cr.AggregationRule == nil {
			continue
		}
		n++
		rules += len(cr.Rules)
		mine := snap.RBAC.ClusterRole(cr.Name)
		switch {
		case mine == nil:
			errs = append(errs, fmt.Errorf("aggregated ClusterRole %s: missing in deputy's snapshot", cr.Name))
		case equality.Semantic.DeepEqual(mine.Rules, cr.Rules):
		case sameRuleSet(mine.Rules, cr.Rules):
			reordered++
		default:
			errs = append(errs, fmt.Errorf("aggregated ClusterRole %s: deputy computed rules\n%s\nkube-controller-manager's controller wrote\n%s",
				cr.Name, describeRules(mine.Rules), describeRules(cr.Rules)))
		}
	}
	summary := fmt.Sprintf("%d aggregated, %d rules, the same as deputy computes", n, rules)
	if reordered > 0 {
		summary += fmt.Sprintf(" (%d in another order)", reordered)
	}
	return summary, errors.Join(errs...)
}

func readPolicyDir(dir string) ([]policy.SourceFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []policy.SourceFile
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files = append(files, policy.SourceFile{Name: filepath.Join(dir, e.Name()), Data: data})
	}
	return files, nil
}

func sameRuleSet(a, b []rbacv1.PolicyRule) bool {
	contains := func(rules []rbacv1.PolicyRule, r rbacv1.PolicyRule) bool {
		return slices.ContainsFunc(rules, func(x rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(x, r) })
	}
	for _, r := range a {
		if !contains(b, r) {
			return false
		}
	}
	for _, r := range b {
		if !contains(a, r) {
			return false
		}
	}
	return true
}

func describeRules(rules []rbacv1.PolicyRule) string {
	var b strings.Builder
	for _, r := range rules {
		fmt.Fprintf(&b, "  %s\n", deputyauthz.DescribeRule(&r))
	}
	return b.String()
}

// createSentinels creates, after every other object, a ClusterRole, a
// ClusterRoleBinding, a Role and a RoleBinding allowing the user
// conformance-sentinel two things, and waits until the apiserver allows
// both: each RBAC informer then has seen every earlier write of its kind
// (a watch delivers one resource's events in order).
func createSentinels(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	const name = "conformance-sentinel"
	rbac := cs.RbacV1()
	rule := func(resource string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{"conformance.deputy.dev"}, Resources: []string{resource}}}
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}
	meta := metav1.ObjectMeta{Name: name}
	nsMeta := metav1.ObjectMeta{Name: name, Namespace: namespace}
	o := metav1.CreateOptions{}
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: rule("clustersentinels")}, o); err != nil {
		return err
	}
	if _, err := rbac.Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: nsMeta, Rules: rule("sentinels")}, o); err != nil {
		return err
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}, o); err != nil {
		return err
	}
	if _, err := rbac.RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: nsMeta, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}, o); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, ra := range []*authorizationv1.ResourceAttributes{
		{Verb: "get", Group: "conformance.deputy.dev", Resource: "clustersentinels"},
		{Verb: "get", Group: "conformance.deputy.dev", Resource: "sentinels", Namespace: namespace},
	} {
		for {
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: name, ResourceAttributes: ra}}, metav1.CreateOptions{})
			if err == nil && sar.Status.Allowed {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the apiserver's RBAC cache did not catch up with the sentinel (%s): %v", ra.Resource, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// readBack lists every RBAC object the apiserver holds, in list order.
func readBack(ctx context.Context, cs kubernetes.Interface) (*Policy, error) {
	rbac := cs.RbacV1()
	p := &Policy{}
	crs, err := rbac.ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range crs.Items {
		p.ClusterRoles = append(p.ClusterRoles, &crs.Items[i])
	}
	roles, err := rbac.Roles("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range roles.Items {
		p.Roles = append(p.Roles, &roles.Items[i])
	}
	crbs, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range crbs.Items {
		p.ClusterRoleBindings = append(p.ClusterRoleBindings, &crbs.Items[i])
	}
	rbs, err := rbac.RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range rbs.Items {
		p.RoleBindings = append(p.RoleBindings, &rbs.Items[i])
	}
	return p, nil
}

type answers struct{ apiserver, deputy sarAnswer }

// askBoth asks every request of the apiserver and of deputy, concurrency at
// a time each.
func askBoth(ctx context.Context, cs kubernetes.Interface, deputy func(Request) (sarAnswer, error), reqs []Request) ([]answers, error) {
	out := make([]answers, len(reqs))
	errs := make([]error, len(reqs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for i := range next {
				sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx,
					&authorizationv1.SubjectAccessReview{Spec: reqs[i].Spec}, metav1.CreateOptions{})
				if err != nil {
					errs[i] = fmt.Errorf("kube-apiserver: %s: %w", reqs[i], err)
					continue
				}
				st := sar.Status
				out[i].apiserver = sarAnswer{Allowed: st.Allowed, Denied: st.Denied, Reason: st.Reason, EvaluationError: st.EvaluationError}
				if out[i].deputy, err = deputy(reqs[i]); err != nil {
					errs[i] = fmt.Errorf("deputy: %s: %w", reqs[i], err)
				}
			}
		})
	}
	for i := range reqs {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return out, errors.Join(slices.DeleteFunc(errs, func(err error) bool { return err == nil })...)
}

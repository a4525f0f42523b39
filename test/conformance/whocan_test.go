package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	deputyauthz "deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/test/framework"
)

// The cross-check of `deputy who-can` and `deputy can-i --list`
// (authorizer.WhoCan, authorizer.RulesFor): for every generated request and
// every subject of the policy (probed as kube-apiserver's authenticators
// would present it), a judge (kube-apiserver's SubjectAccessReview API, or
// in process upstream's RBACAuthorizer) says whether it is allowed, and
//   - every subject WhoCan names (directly or as a member of an expanded
//     group) must be allowed;
//   - every allowed subject must be named, directly or through a group
//     expansion;
//   - the rules RulesFor lists for the subject in the request's namespace
//     allow the request (by upstream's rbac.RuleAllows) iff it is allowed.
//
// The probes are built here, independently of the code under test.

// Sizes of the real-apiserver who-can run, from the environment:
// WHOCAN_REQUESTS requests per seed (each asked for every subject of the
// policy), over WHOCAN_SEEDS seeds starting at CONFORMANCE_SEED.
const (
	defaultWhoCanRequests = 200
	defaultWhoCanSeeds    = 2
)

// whoCanProbe is one subject of a policy and the user info it authenticates
// with: a User with system:authenticated (system:anonymous with
// system:unauthenticated), a ServiceAccount (or a User spelled
// system:serviceaccount:NS:NAME) with system:serviceaccounts,
// system:serviceaccounts:NS and system:authenticated, a Group as an unknown
// user with only that group.
type whoCanProbe struct {
	key    string // "user:<name>" or "group:<name>"
	user   string
	groups []string
}

func probeFor(kind, name string) whoCanProbe {
	if kind == rbacv1.GroupKind {
		return whoCanProbe{key: "group:" + name, groups: []string{name}}
	}
	p := whoCanProbe{key: "user:" + name, user: name, groups: []string{user.AllAuthenticated}}
	if name == user.Anonymous {
		p.groups = []string{user.AllUnauthenticated}
	}
	if ns, _, err := serviceaccount.SplitUsername(name); err == nil {
		p.groups = []string{serviceaccount.AllServiceAccountsGroup, serviceaccount.MakeNamespaceGroupName(ns), user.AllAuthenticated}
	}
	return p
}

// policyProbes returns every distinct subject of p's bindings (a
// ServiceAccount's namespace defaulting to its RoleBinding's; one without a
// namespace in a ClusterRoleBinding matches nobody and is skipped), and
// system:anonymous.
func policyProbes(p *Policy) []whoCanProbe {
	seen := map[string]bool{}
	var out []whoCanProbe
	add := func(subjects []rbacv1.Subject, ns string) {
		for _, s := range subjects {
			name := s.Name
			switch s.Kind {
			case rbacv1.ServiceAccountKind:
				if s.Namespace != "" {
					ns = s.Namespace
				}
				if ns == "" {
					continue
				}
				name = serviceaccount.MakeUsername(ns, s.Name)
			case rbacv1.UserKind, rbacv1.GroupKind:
			default:
				continue
			}
			pr := probeFor(s.Kind, name)
			if !seen[pr.key] {
				seen[pr.key] = true
				out = append(out, pr)
			}
		}
	}
	add([]rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user.Anonymous}}, "")
	for _, b := range p.ClusterRoleBindings {
		add(b.Subjects, "")
	}
	for _, b := range p.RoleBindings {
		add(b.Subjects, b.Namespace)
	}
	return out
}

// judge answers whether each SubjectAccessReview is allowed.
type judge func(ctx context.Context, specs []authorizationv1.SubjectAccessReviewSpec) ([]bool, error)

// upstreamJudge is kube-apiserver's RBACAuthorizer in process.
func upstreamJudge(p *Policy) judge {
	authz := NewUpstream(p)
	return func(ctx context.Context, specs []authorizationv1.SubjectAccessReviewSpec) ([]bool, error) {
		out := make([]bool, len(specs))
		for i, spec := range specs {
			a, err := Attributes(spec)
			if err != nil {
				return nil, err
			}
			d, _, _ := authz.Authorize(ctx, a)
			out[i] = d == authorizer.DecisionAllow
		}
		return out, nil
	}
}

// apiserverJudge asks kube-apiserver's SubjectAccessReview API, concurrency
// at a time.
func apiserverJudge(cs kubernetes.Interface) judge {
	return func(ctx context.Context, specs []authorizationv1.SubjectAccessReviewSpec) ([]bool, error) {
		out := make([]bool, len(specs))
		errs := make([]error, len(specs))
		next := make(chan int)
		var wg sync.WaitGroup
		for range concurrency {
			wg.Go(func() {
				for i := range next {
					sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx,
						&authorizationv1.SubjectAccessReview{Spec: specs[i]}, metav1.CreateOptions{})
					if err != nil {
						errs[i] = err
						continue
					}
					out[i] = sar.Status.Allowed
				}
			})
		}
		for i := range specs {
			select {
			case next <- i:
			case <-ctx.Done():
			}
		}
		close(next)
		wg.Wait()
		return out, errors.Join(errs...)
	}
}

// checkWhoCan compares ans with the judge's answers for every probe
// (allowed[i] for probes[i]) and returns every disagreement.
func checkWhoCan(ans deputyauthz.WhoCanAnswer, probes []whoCanProbe, allowed []bool) []string {
	allowedKeys := map[string]bool{}
	probed := map[string]bool{}
	for i, p := range probes {
		probed[p.key] = true
		if allowed[i] {
			allowedKeys[p.key] = true
		}
	}
	var problems []string
	named := map[string]bool{}
	name := func(key, via string) {
		named[key] = true
		switch {
		case !probed[key]:
			problems = append(problems, fmt.Sprintf("who-can names %s (%s), which is no subject of the policy", key, via))
		case !allowedKeys[key]:
			problems = append(problems, fmt.Sprintf("who-can names %s (%s), which the judge does not allow", key, via))
		}
	}
	for _, g := range ans.Grants {
		key := "user:" + g.UserName
		if g.Subject.Kind == rbacv1.GroupKind {
			key = "group:" + g.Subject.Name
		}
		name(key, g.Reason)
	}
	for _, e := range ans.Groups {
		for _, m := range e.Members {
			name("user:"+m, "member of group "+e.Group)
		}
	}
	for i, p := range probes {
		if allowed[i] && !named[p.key] {
			problems = append(problems, fmt.Sprintf("the judge allows %s (groups %q), which who-can does not name", p.key, p.groups))
		}
	}
	return problems
}

// checkRules reports a disagreement between the rules listed for a probe
// and the judge's answer for a (a request with the probe's user).
func checkRules(rules []deputyauthz.RuleGrant, a authorizer.Attributes, allowed bool) string {
	for _, r := range rules {
		if rbac.RuleAllows(a, r.Rule) {
			if !allowed {
				return fmt.Sprintf("rule %s of %s allows it, but the judge does not", deputyauthz.DescribeRule(r.Rule), r.Reason())
			}
			return ""
		}
	}
	if allowed {
		return fmt.Sprintf("the judge allows it, but none of the %d rules listed does", len(rules))
	}
	return ""
}

type whoCanStats struct {
	requests, probes, sars, grants, allowedProbes, expansions, problems int
}

func (s whoCanStats) String() string {
	subjects := ""
	if s.probes > 0 {
		subjects = fmt.Sprintf(" × %d subjects", s.probes)
	}
	return fmt.Sprintf("%d requests%s = %d SubjectAccessReviews, %d allowed; who-can named %d (binding, subject) grants and expanded %d groups; %d disagreements",
		s.requests, subjects, s.sars, s.allowedProbes, s.grants, s.expansions, s.problems)
}

// crossCheck runs WhoCan and RulesFor over snap (which must hold p) for
// every request and compares with j; report gets every disagreement.
func crossCheck(ctx context.Context, p *Policy, snap *policy.Snapshot, reqs []Request, j judge, report func(string)) (whoCanStats, error) {
	probes := policyProbes(p)
	specs := make([]authorizationv1.SubjectAccessReviewSpec, 0, len(reqs)*len(probes))
	for _, req := range reqs {
		for _, pr := range probes {
			spec := *req.Spec.DeepCopy()
			spec.User, spec.Groups, spec.UID, spec.Extra = pr.user, pr.groups, "", nil
			specs = append(specs, spec)
		}
	}
	allowed, err := j(ctx, specs)
	if err != nil {
		return whoCanStats{}, err
	}
	s := whoCanStats{requests: len(reqs), probes: len(probes), sars: len(specs)}
	type rulesKey struct {
		probe     int
		namespace string
	}
	rulesCache := map[rulesKey][]deputyauthz.RuleGrant{}
	for i, req := range reqs {
		attrs, err := Attributes(req.Spec)
		if err != nil {
			return s, err
		}
		got := allowed[i*len(probes) : (i+1)*len(probes)]
		ans := deputyauthz.WhoCan(ctx, snap, attrs, deputyauthz.WhoCanOptions{})
		s.grants += len(ans.Grants)
		s.expansions += len(ans.Groups)
		for _, problem := range checkWhoCan(ans, probes, got) {
			s.problems++
			report(fmt.Sprintf("who-can %s: %s", req, problem))
		}
		for k, pr := range probes {
			if got[k] {
				s.allowedProbes++
			}
			u := &user.DefaultInfo{Name: pr.user, Groups: pr.groups}
			key := rulesKey{k, attrs.Namespace}
			rules, ok := rulesCache[key]
			if !ok {
				rules, _ = deputyauthz.RulesFor(snap, u, attrs.Namespace)
				rulesCache[key] = rules
			}
			a := attrs
			a.User = u
			if problem := checkRules(rules, a, got[k]); problem != "" {
				s.problems++
				report(fmt.Sprintf("can-i --list for %s in namespace %q, request %s: %s", pr.key, attrs.Namespace, req, problem))
			}
		}
	}
	return s, nil
}

func inProcessPolicy(seed uint64) (*Policy, *policy.Snapshot, *rand.Rand, error) {
	r := rand.New(rand.NewPCG(seed, 17))
	o := Options{Valid: true, Namespaces: 3, ClusterRoles: 10, Roles: 10, ClusterRoleBindings: 15, RoleBindings: 20,
		KnownClusterRoles: bootstrapClusterRoleNames()}
	p := GeneratePolicy(r, o)
	p.merge(bootstrapPolicy())
	rb, err := policy.NewRBAC(p.DeputyObjects(), false)
	if err != nil {
		return nil, nil, nil, err
	}
	return p, &policy.Snapshot{RBAC: rb}, r, nil
}

// TestWhoCanAndRulesInProcess is the cross-check with upstream's
// RBACAuthorizer as the judge, over generated policies with kube-apiserver's
// bootstrap policy.
func TestWhoCanAndRulesInProcess(t *testing.T) {
	var total whoCanStats
	for seed := range uint64(10) {
		p, snap, r, err := inProcessPolicy(seed)
		if err != nil {
			t.Fatal(err)
		}
		failures := 0
		s, err := crossCheck(t.Context(), p, snap, GenerateRequests(r, p, 40), upstreamJudge(p), func(msg string) {
			if failures++; failures <= 10 {
				t.Errorf("seed %d: %s", seed, msg)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		total.requests += s.requests
		total.sars += s.sars
		total.grants += s.grants
		total.allowedProbes += s.allowedProbes
		total.expansions += s.expansions
		total.problems += s.problems
	}
	if total.allowedProbes == 0 || total.grants == 0 {
		t.Errorf("nothing was allowed (%s): the check checked nothing", total)
	}
	t.Logf("%s", total)
}

// TestWhoCanCheckCatchesBrokenAnswers makes sure the cross-check can fail:
// answers with a subject left out, a subject added, or a rule left out are
// caught.
func TestWhoCanCheckCatchesBrokenAnswers(t *testing.T) {
	p, snap, r, err := inProcessPolicy(3)
	if err != nil {
		t.Fatal(err)
	}
	probes := policyProbes(p)
	j := upstreamJudge(p)
	for _, req := range GenerateRequests(r, p, 200) {
		attrs, err := Attributes(req.Spec)
		if err != nil {
			t.Fatal(err)
		}
		var specs []authorizationv1.SubjectAccessReviewSpec
		for _, pr := range probes {
			spec := *req.Spec.DeepCopy()
			spec.User, spec.Groups = pr.user, pr.groups
			specs = append(specs, spec)
		}
		allowed, err := j(t.Context(), specs)
		if err != nil {
			t.Fatal(err)
		}
		k := slices.Index(allowed, true)
		deny := slices.Index(allowed, false)
		if k < 0 || deny < 0 {
			continue // need an allowed and a denied subject
		}
		ans := deputyauthz.WhoCan(t.Context(), snap, attrs, deputyauthz.WhoCanOptions{})
		if problems := checkWhoCan(ans, probes, allowed); len(problems) > 0 {
			t.Fatalf("the real answer fails the check: %q", problems)
		}
		if problems := checkWhoCan(deputyauthz.WhoCanAnswer{}, probes, allowed); len(problems) == 0 {
			t.Errorf("%s: an answer naming nobody passes the check", req)
		}
		bogus := ans
		bogus.Grants = append(slices.Clone(ans.Grants), deputyauthz.Grant{Subject: rbacv1.Subject{Kind: rbacv1.UserKind, Name: probes[deny].user}, UserName: probes[deny].user})
		if probes[deny].user == "" {
			bogus.Grants[len(bogus.Grants)-1].Subject = rbacv1.Subject{Kind: rbacv1.GroupKind, Name: probes[deny].groups[0]}
		}
		if problems := checkWhoCan(bogus, probes, allowed); len(problems) == 0 {
			t.Errorf("%s: an answer naming %s, which is not allowed, passes the check", req, probes[deny].key)
		}
		a := attrs
		a.User = &user.DefaultInfo{Name: probes[k].user, Groups: probes[k].groups}
		rules, _ := deputyauthz.RulesFor(snap, a.User, attrs.Namespace)
		if problem := checkRules(rules, a, true); problem != "" {
			t.Fatalf("the real rules fail the check: %s", problem)
		}
		if checkRules(nil, a, true) == "" {
			t.Errorf("%s: an empty rule list passes the check for %s, which is allowed", req, probes[k].key)
		}
		return
	}
	t.Fatal("no request had both an allowed and a denied subject")
}

// TestWhoCanAndRulesAgainstAPIServer is the cross-check with kube-apiserver
// v1.37.2 (RBAC authorization only) as the judge: per seed, the conformance
// run's setup (setupSeedPolicy: generated policy, named cases, aggregation,
// bootstrap policy), then WHOCAN_REQUESTS generated requests, each asked for
// every subject of the policy through the SubjectAccessReview API, against
// WhoCan and RulesFor over the policy as deputy loads it from the file.
func TestWhoCanAndRulesAgainstAPIServer(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	requests := envInt(t, "WHOCAN_REQUESTS", defaultWhoCanRequests)
	seeds := envInt(t, "WHOCAN_SEEDS", defaultWhoCanSeeds)
	first := envInt(t, "CONFORMANCE_SEED", 1)
	assets, err := framework.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	var total whoCanStats
	start := time.Now()
	for i := range seeds {
		seed := uint64(first + i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			sp := setupSeedPolicy(t, seed, assets)
			files, err := readPolicyDir(sp.policyDir)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := policy.Load(files)
			if err != nil {
				t.Fatalf("deputy's loader rejects what kube-apiserver holds: %v", err)
			}
			reqs := GenerateRequests(sp.r, sp.held, requests)
			for _, c := range sp.named {
				reqs = append(reqs, c.req)
			}
			failures := 0
			t0 := time.Now()
			s, err := crossCheck(t.Context(), sp.held, snap, reqs, apiserverJudge(sp.cs), func(msg string) {
				if failures++; failures <= 20 {
					t.Error(msg)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if failures > 20 {
				t.Errorf("… and %d more", failures-20)
			}
			if s.allowedProbes == 0 {
				t.Errorf("kube-apiserver allowed nothing (%s): the check checked nothing", s)
			}
			t.Logf("seed %d: %s (asking and checking %s)", seed, s, time.Since(t0).Round(time.Millisecond))
			total.requests += s.requests
			total.sars += s.sars
			total.grants += s.grants
			total.allowedProbes += s.allowedProbes
			total.expansions += s.expansions
			total.problems += s.problems
		})
	}
	t.Logf("TOTAL: %d seeds, %s, in %s", seeds, total, time.Since(start).Round(time.Second))
}

package authorizer

import (
	"context"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"deputy.dev/deputy/policy"
)

// Reverse queries over the decision Authorize makes: who may make a request
// (WhoCan), and what a user may do (RulesFor, Gate.RightsOf). They use the
// same rule matcher (request.allows) and binding visit order as Authorize,
// and every subject WhoCan names is verified through the composed decision
// deputy serve makes (the gate, then RBAC, then the default decision).

// WhoCanOptions is the composition WhoCan verifies candidates through, as
// deputy serve composes it (serve/authorization.go): the gate first, then
// deputy's RBAC, then the default decision.
type WhoCanOptions struct {
	// Gate is the impersonation gate; nil: none (no impersonators, no
	// protected targets).
	Gate *Gate
	// Default is deputy's default decision. With DefaultDeny deputy denies
	// what it has no opinion on, so ClusterRBAC is never reached.
	Default DefaultDecision
	// ClusterRBAC, when not nil, is the cluster's RBAC (kube-apiserver's next
	// authorizer): it decides what deputy has no opinion on.
	ClusterRBAC *policy.RBAC
}

// Via names the part of the composed decision that allows.
type Via string

// The parts of the composed decision.
const (
	ViaRBAC        Via = "RBAC"
	ViaGate        Via = "impersonation gate"
	ViaClusterRBAC Via = "cluster RBAC"
)

// Grant is one subject the composed decision allows, and why.
type Grant struct {
	// Subject is the subject as the binding names it, a ServiceAccount's
	// namespace defaulted to the binding's (kube-apiserver's appliesToUser);
	// for an impersonator without a binding, the configured identity.
	Subject rbacv1.Subject
	// UserName is the user the subject authenticates as
	// (system:serviceaccount:NS:NAME for a ServiceAccount); "" for a group.
	UserName string
	// Via is the part of the composed decision that allowed it.
	Via Via
	// Binding and Rule are the binding naming the subject and its first rule
	// that allows the request (Authorize's matcher); nil for an impersonator
	// the gate allows without one.
	Binding *policy.Binding
	Rule    *rbacv1.PolicyRule
	// Reason is the allow reason: upstream's RBAC reason for this binding
	// and subject, or the gate's, which names the AppProject entry.
	Reason string
}

// GroupExpansion names the users of the policy in a group a Grant names.
type GroupExpansion struct {
	Group string `json:"group"`
	// Known reports whether membership follows from user names
	// (system:authenticated, system:unauthenticated, system:serviceaccounts
	// and system:serviceaccounts:NS); other groups' members come from the
	// authenticator, which the policy does not know.
	Known bool `json:"known"`
	// Description says who is in the group ("every authenticated user").
	Description string `json:"description"`
	// Members are the users and ServiceAccounts named in the policy (and the
	// configured impersonators) that are in the group and that the composed
	// decision allows, sorted.
	Members []string `json:"members,omitempty"`
}

// Refusal is a subject a binding's rule matches that the composed decision
// does not allow (the gate denies: protected target, strict mode,
// impersonator outside its projects).
type Refusal struct {
	Subject rbacv1.Subject
	Binding *policy.Binding
	Reason  string
}

// WhoCanAnswer is WhoCan's result.
type WhoCanAnswer struct {
	// Grants are in visit order: the configured impersonators the gate
	// allows, then ClusterRoleBindings, then the RoleBindings of the
	// request namespace (deputy's, then the cluster's).
	Grants []Grant
	// Groups expands each group named by Grants.
	Groups []GroupExpansion
	// Refused are candidates the composed decision does not allow.
	Refused []Refusal
	// Warnings are the role references of bindings that apply to the
	// request's namespace that could not be resolved: they grant nothing.
	Warnings []error
}

// WhoCan answers who may make the request a (its user is ignored): every
// (binding, subject) of the bindings Authorize would visit for the request's
// namespace (ClusterRoleBindings always, RoleBindings of that namespace only)
// whose role has a rule allowing the request, and, for impersonation checks,
// every configured impersonator; each verified through the composed decision
// of o with the user info the subject authenticates with: a User its name
// and system:authenticated (system:anonymous: system:unauthenticated), a
// ServiceAccount its user name with system:serviceaccounts,
// system:serviceaccounts:NS and system:authenticated, a Group an unnamed user
// in only that group. A candidate the gate denies is in Refused, not Grants
// (the gate's Deny is final). Where the gate has no opinion, a subject of
// deputy's allowing binding is allowed by RBAC by construction and RBAC is
// not evaluated again (100,000 grants would cost 100,000 binding walks); on
// impersonation checks the gate is asked for every subject, and subjects of
// the cluster's RBAC and group members of impersonation checks are decided
// in full. snap nil: an empty answer with policy.ErrNotLoaded as warning.
func WhoCan(ctx context.Context, snap *policy.Snapshot, a authorizer.Attributes, o WhoCanOptions) WhoCanAnswer {
	var ans WhoCanAnswer
	if snap == nil {
		ans.Warnings = []error{policy.ErrNotLoaded}
		return ans
	}
	w := whoCan{ctx: ctx, snap: snap, a: a, o: o, req: newRequest(a), verified: map[string]verdict{}, done: map[string]bool{}}
	if o.Gate != nil {
		if kind, _, _ := classifyImpersonation(a); kind != NotImpersonation {
			w.gateDecides = true
			for _, imp := range o.Gate.opts.Impersonators {
				w.impersonator(&ans, imp.UserName)
			}
		}
	}
	w.bindings(&ans, snap.RBAC, false)
	if o.ClusterRBAC != nil {
		w.bindings(&ans, o.ClusterRBAC, true)
	}
	w.expandGroups(&ans)
	return ans
}

type verdict struct {
	allowed bool
	via     Via
	reason  string
}

type whoCan struct {
	ctx      context.Context
	snap     *policy.Snapshot
	a        authorizer.Attributes
	o        WhoCanOptions
	req      request
	verified map[string]verdict // by user key (userKey)
	done     map[string]bool    // impersonators granted by the gate
	// gateDecides: the request is an impersonation check, on which the
	// gate may have an opinion (it has none on anything else, for anyone).
	gateDecides bool
}

// withUser is a request's attributes with another user.
type withUser struct {
	authorizer.Attributes
	u user.Info
}

func (w withUser) GetUser() user.Info { return w.u }

// decide is the composed decision for u: the gate, deputy's RBAC, the
// default decision, the cluster's RBAC.
func (w *whoCan) decide(u user.Info) verdict {
	key := userKey(u)
	if v, ok := w.verified[key]; ok {
		return v
	}
	v := w.decideUncached(withUser{Attributes: w.a, u: u})
	w.verified[key] = v
	return v
}

// gateVerdict is the gate's decision for u; decided is false when the gate
// has no opinion (or there is no gate).
func (w *whoCan) gateVerdict(u user.Info) (v verdict, decided bool) {
	if w.o.Gate == nil {
		return verdict{}, false
	}
	switch d, reason, err := w.o.Gate.Authorize(w.ctx, withUser{Attributes: w.a, u: u}); d {
	case authorizer.DecisionAllow:
		return verdict{allowed: true, via: ViaGate, reason: reason}, true
	case authorizer.DecisionDeny:
		if err != nil {
			reason += " (" + err.Error() + ")"
		}
		return verdict{via: ViaGate, reason: reason}, true
	}
	return verdict{}, false
}

func (w *whoCan) decideUncached(a authorizer.Attributes) verdict {
	if v, decided := w.gateVerdict(a.GetUser()); decided {
		return v
	}
	if ex := Explain(w.snap, a); ex.Binding != nil {
		return verdict{allowed: true, via: ViaRBAC, reason: ex.Reason()}
	}
	if w.o.Default == DefaultDeny {
		return verdict{reason: denyReason + " (authorization.defaultDecision is Deny)"}
	}
	if w.o.ClusterRBAC != nil {
		if ex := Explain(&policy.Snapshot{RBAC: w.o.ClusterRBAC}, a); ex.Binding != nil {
			return verdict{allowed: true, via: ViaClusterRBAC, reason: ex.Reason()}
		}
	}
	return verdict{reason: "no opinion"}
}

func userKey(u user.Info) string {
	return u.GetName() + "\x00" + strings.Join(u.GetGroups(), "\x00")
}

// impersonator adds a configured sync identity the composed decision allows
// through the gate.
func (w *whoCan) impersonator(ans *WhoCanAnswer, name string) {
	v := w.decide(SubjectUser(userSubject(name)))
	if !v.allowed {
		if v.via == ViaGate {
			ans.Refused = append(ans.Refused, Refusal{Subject: userSubject(name), Reason: v.reason})
		}
		return
	}
	if v.via != ViaGate {
		return // RBAC allows it: named by its binding
	}
	w.done[name] = true
	ans.Grants = append(ans.Grants, Grant{Subject: userSubject(name), UserName: name, Via: ViaGate, Reason: v.reason})
}

// userSubject is the subject a user name stands for: a ServiceAccount for
// system:serviceaccount:NS:NAME, else a User.
func userSubject(name string) rbacv1.Subject {
	if ns, sa, err := serviceaccount.SplitUsername(name); err == nil {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}
	}
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

// bindings adds the candidates of the bindings of r that Authorize would
// visit for the request's namespace.
func (w *whoCan) bindings(ans *WhoCanAnswer, r *policy.RBAC, cluster bool) {
	visit := func(list []policy.Binding) {
		// Two passes: the rules first, so that Grants grows once (a
		// slice of 100,000 grants grown by append costs more than the
		// matching).
		rules := make([]*rbacv1.PolicyRule, len(list))
		n := 0
		for i := range list {
			b := &list[i]
			if b.RoleErr != nil {
				ans.Warnings = append(ans.Warnings, bindingError(b))
				continue
			}
			if rules[i] = w.allowingRule(b); rules[i] != nil {
				n += len(b.Subjects)
			}
		}
		ans.Grants = slices.Grow(ans.Grants, n)
		for i, rule := range rules {
			if rule == nil {
				continue
			}
			for si := range list[i].Subjects {
				w.candidate(ans, &list[i], si, rule, cluster)
			}
		}
	}
	visit(r.ClusterRoleBindings())
	if ns := w.a.GetNamespace(); ns != "" {
		visit(r.RoleBindings(ns))
	}
}

func (w *whoCan) allowingRule(b *policy.Binding) *rbacv1.PolicyRule {
	for i := range b.Rules {
		if w.req.allows(&b.Rules[i]) {
			return &b.Rules[i]
		}
	}
	return nil
}

func (w *whoCan) candidate(ans *WhoCanAnswer, b *policy.Binding, si int, rule *rbacv1.PolicyRule, cluster bool) {
	s, ok := NormalizeSubject(b.Subjects[si], b.Namespace)
	if !ok {
		return
	}
	userName := subjectUserName(s)
	if w.done[userName] {
		return // an impersonator the gate allows: named once, with its AppProject entry
	}
	// Without the gate's opinion the composed decision is RBAC's, and RBAC
	// allows: b is one of the bindings Authorize visits for the user s
	// authenticates as (the subject index finds b by s's user or group
	// name, as the conformance run proves), and rule allows. Evaluating
	// RBAC again would cost a binding walk per grant.
	v := verdict{allowed: true, via: ViaRBAC}
	switch {
	case cluster:
		v = w.decide(SubjectUser(s))
	case w.gateDecides:
		if gv, decided := w.gateVerdict(SubjectUser(s)); decided {
			v = gv
		}
	}
	switch {
	case !v.allowed:
		ans.Refused = append(ans.Refused, Refusal{Subject: s, Binding: b, Reason: v.reason})
		return
	case cluster && v.via != ViaClusterRBAC:
		// deputy allows it first: named by deputy's own bindings or a group
		// expansion.
		return
	}
	g := Grant{Subject: s, Via: v.via, Binding: b, Rule: rule, Reason: b.Reasons[si]}
	if v.via == ViaGate {
		g.Reason = v.reason
	}
	g.UserName = userName
	ans.Grants = append(ans.Grants, g)
}

// subjectUserName is the user name a (normalized) subject authenticates as;
// "" for a group.
func subjectUserName(s rbacv1.Subject) string {
	switch s.Kind {
	case rbacv1.GroupKind:
		return ""
	case rbacv1.ServiceAccountKind:
		return serviceaccount.MakeUsername(s.Namespace, s.Name)
	}
	return s.Name
}

// NormalizeSubject returns subject as kube-apiserver's appliesToUser
// (pkg/registry/rbac/validation/rule.go) reads it in a binding of namespace
// bindingNamespace ("" for a ClusterRoleBinding): a ServiceAccount without a
// namespace takes the binding's. ok is false for a subject that matches no
// user: a ServiceAccount without a namespace in a ClusterRoleBinding, an
// unknown kind, an empty name.
func NormalizeSubject(subject rbacv1.Subject, bindingNamespace string) (rbacv1.Subject, bool) {
	if subject.Name == "" {
		return subject, false
	}
	switch subject.Kind {
	case rbacv1.UserKind, rbacv1.GroupKind:
		return subject, true
	case rbacv1.ServiceAccountKind:
		if subject.Namespace == "" {
			subject.Namespace = bindingNamespace
		}
		return subject, subject.Namespace != ""
	}
	return subject, false
}

// SubjectUser is the user info a (normalized) subject authenticates with,
// the groups kube-apiserver's authenticators add included: a User its name
// with system:authenticated (system:anonymous: system:unauthenticated, as
// the anonymous authenticator gives), a ServiceAccount its user name with
// system:serviceaccounts, system:serviceaccounts:NS and
// system:authenticated, a Group an unnamed user in only that group.
func SubjectUser(s rbacv1.Subject) user.Info {
	switch s.Kind {
	case rbacv1.GroupKind:
		return &user.DefaultInfo{Groups: []string{s.Name}}
	case rbacv1.ServiceAccountKind:
		name := serviceaccount.MakeUsername(s.Namespace, s.Name)
		return &user.DefaultInfo{Name: name, Groups: AuthenticatedGroups(name, nil)}
	}
	if s.Name == user.Anonymous {
		return &user.DefaultInfo{Name: s.Name, Groups: []string{user.AllUnauthenticated}}
	}
	return &user.DefaultInfo{Name: s.Name, Groups: AuthenticatedGroups(s.Name, nil)}
}

// AuthenticatedGroups returns groups plus what kube-apiserver adds to an
// authenticated user name: system:serviceaccounts and
// system:serviceaccounts:NS for a ServiceAccount (the ServiceAccount token
// authenticator), and system:authenticated for everyone but
// system:anonymous (the authenticated-group adder). The input is not
// modified.
func AuthenticatedGroups(name string, groups []string) []string {
	out := slices.Clone(groups)
	add := func(g string) {
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	if ns, _, err := serviceaccount.SplitUsername(name); err == nil {
		add(serviceaccount.AllServiceAccountsGroup)
		add(serviceaccount.MakeNamespaceGroupName(ns))
	}
	if name != user.Anonymous {
		add(user.AllAuthenticated)
	}
	return out
}

// bindingError is b's role resolution error with the binding named, e.g.
// `RoleBinding "b/ns" grants nothing: role.rbac.authorization.k8s.io "r" not
// found`; it wraps b.RoleErr.
func bindingError(b *policy.Binding) error {
	if b.Namespace == "" {
		return fmt.Errorf("ClusterRoleBinding %q grants nothing: %w", b.Name, b.RoleErr)
	}
	return fmt.Errorf("RoleBinding %q grants nothing: %w", b.Name+"/"+b.Namespace, b.RoleErr)
}

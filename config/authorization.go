package config

import (
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Authorization configures SubjectAccessReview answers.
type Authorization struct {
	// DefaultDecision is NoOpinion (default: kube-apiserver's next authorizer
	// decides) or Deny (nothing deputy does not allow is allowed).
	DefaultDecision string `json:"defaultDecision,omitempty"`
	// Impersonation configures the impersonation gate.
	Impersonation Impersonation `json:"impersonation,omitempty"`
}

// Impersonation configures the impersonation gate: which identities may
// impersonate the ServiceAccounts their AppProjects derive, and how
// impersonation by everyone else is restricted.
type Impersonation struct {
	// Impersonators are the sync identities (deputy's own, Argo CD's
	// application controller) whose impersonation rights come from
	// AppProjects. Default: deputy's own ServiceAccount deputy-system/deputy
	// with deputy.dev AppProjects.
	Impersonators []Impersonator `json:"impersonators,omitempty"`
	// Strict (default true): for every other subject that is not exempt,
	// impersonate, impersonate:* and impersonate-on:* are allowed only by RBAC
	// rules that name the target in resourceNames; otherwise deputy denies, so
	// kube-apiserver's RBAC cannot allow it afterwards.
	Strict *bool `json:"strict,omitempty"`
	// RequireConstrained (default true) denies legacy `impersonate` to
	// impersonators, so the per-action checks of constrained impersonation
	// (kube-apiserver >= 1.36, or 1.35 with the ConstrainedImpersonation
	// feature gate) cannot be bypassed. false is an opt-in for older
	// apiservers that gives up the per-action caps: legacy
	// impersonation lets the ServiceAccount do whatever its RBAC allows,
	// anywhere.
	RequireConstrained *bool `json:"requireConstrained,omitempty"`
	// Subresources is the allow-list of subresources sync identities may use
	// in their projects' destinations. Default: read-only status, scale and
	// pods/log (see DefaultGateSubresources).
	Subresources []GateSubresource `json:"subresources,omitempty"`
	// Exempt subjects are left to RBAC entirely. Default: group system:masters.
	Exempt []Subject `json:"exempt,omitempty"`
	// ProtectedTargets can never be impersonated through deputy.
	ProtectedTargets *ProtectedTargets `json:"protectedTargets,omitempty"`
	// GateRBAC is what admission does with a Role or ClusterRole granting
	// impersonation without resourceNames: Warn (default) or Deny.
	GateRBAC string `json:"gateRBAC,omitempty"`
}

// Impersonator is one sync identity and where its AppProjects come from.
type Impersonator struct {
	// User is the identity's user name; ServiceAccount ("namespace/name") is
	// the short form of system:serviceaccount:namespace:name. Set one.
	User           string `json:"user,omitempty"`
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// ClusterServer is the URL by which the projects name this cluster.
	// Default https://kubernetes.default.svc.
	ClusterServer string `json:"clusterServer,omitempty"`
	// ClusterName is the cluster's registered name, for destinations given by name.
	ClusterName string `json:"clusterName,omitempty"`
	// Projects selects the AppProjects that grant this identity.
	Projects ProjectSource `json:"projects,omitempty"`
	// ApplicationNamespaces are the namespaces the identity's Applications
	// live in; a destination without a namespace derives a bare-name
	// ServiceAccount in the Application's namespace, so these namespaces are
	// what such entries can reach.
	ApplicationNamespaces []string `json:"applicationNamespaces,omitempty"`
}

// ProjectSource selects AppProjects.
type ProjectSource struct {
	// APIGroups: argoproj.io and/or deputy.dev. Default [deputy.dev].
	APIGroups []string `json:"apiGroups,omitempty"`
	// Namespaces the AppProjects live in. Default: for an impersonator of
	// deputy.dev AppProjects, sync.projectNamespaces (so the engine and the
	// gate read the same projects); otherwise deputy's own namespace
	// (OwnNamespace). ["*"] reads every namespace, which lets whoever may
	// write an AppProject anywhere grant impersonation.
	Namespaces []string `json:"namespaces,omitempty"`
}

// Subject names a user, a group or a ServiceAccount ("namespace/name"); set one.
type Subject struct {
	User           string `json:"user,omitempty"`
	Group          string `json:"group,omitempty"`
	ServiceAccount string `json:"serviceAccount,omitempty"`
}

// ProtectedTargets are identities the gate never lets anyone impersonate.
type ProtectedTargets struct {
	// Groups that cannot be impersonated. Default [system:masters].
	Groups []string `json:"groups,omitempty"`
	// UserPrefixes: users whose name starts with one cannot be impersonated.
	// Default [system:kube-].
	UserPrefixes []string `json:"userPrefixes,omitempty"`
	// ServiceAccountNamespaces: no ServiceAccount of these namespaces can be
	// impersonated. Default [kube-system].
	ServiceAccountNamespaces []string `json:"serviceAccountNamespaces,omitempty"`
}

// SetImpersonationDefaults fills the gate's defaults: deputy's own sync
// identity as the only impersonator, strict on, group system:masters exempt,
// and the protected targets system:masters, system:kube-* users and
// kube-system ServiceAccounts; per impersonator the cluster server
// https://kubernetes.default.svc and deputy.dev AppProjects.
func SetImpersonationDefaults(im *Impersonation) {
	if im.Impersonators == nil {
		im.Impersonators = []Impersonator{{ServiceAccount: DefaultSyncServiceAccount}}
	}
	for i := range im.Impersonators {
		p := &im.Impersonators[i]
		if p.ClusterServer == "" {
			p.ClusterServer = DefaultClusterServer
		}
		if len(p.Projects.APIGroups) == 0 {
			p.Projects.APIGroups = []string{"deputy.dev"}
		}
		if len(p.Projects.Namespaces) == 0 {
			p.Projects.Namespaces = []string{OwnNamespace()}
		}
	}
	setGateDefaults(im)
	if im.Strict == nil {
		t := true
		im.Strict = &t
	}
	if im.Exempt == nil {
		im.Exempt = []Subject{{Group: "system:masters"}}
	}
	if im.ProtectedTargets == nil {
		im.ProtectedTargets = &ProtectedTargets{
			Groups:                   []string{"system:masters"},
			UserPrefixes:             []string{"system:kube-"},
			ServiceAccountNamespaces: []string{"kube-system"},
		}
	}
	if im.GateRBAC == "" {
		im.GateRBAC = "Warn"
	}
}

func validateImpersonation(im *Impersonation, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]int{}
	for i, p := range im.Impersonators {
		f := fld.Child("impersonators").Index(i)
		name, err := p.UserName()
		if err != nil {
			errs = append(errs, field.Invalid(f, p.User+p.ServiceAccount, err.Error()))
		} else if j, dup := seen[name]; dup {
			errs = append(errs, field.Duplicate(f.Child("user"), fmt.Sprintf("%s (also impersonators[%d])", name, j)))
		} else {
			seen[name] = i
		}
		if u, err := url.Parse(p.ClusterServer); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, field.Invalid(f.Child("clusterServer"), p.ClusterServer, "must be an https:// URL, the one the AppProjects' destinations use for this cluster (e.g. https://kubernetes.default.svc)"))
		}
		for j, g := range p.Projects.APIGroups {
			if g != "argoproj.io" && g != "deputy.dev" {
				errs = append(errs, field.NotSupported(f.Child("projects", "apiGroups").Index(j), g, []string{"argoproj.io", "deputy.dev"}))
			}
		}
		for j, ns := range p.ApplicationNamespaces {
			if strings.TrimSpace(ns) == "" {
				errs = append(errs, field.Invalid(f.Child("applicationNamespaces").Index(j), ns, "must not be empty"))
			}
		}
	}
	for i, s := range im.Exempt {
		n := 0
		for _, v := range []string{s.User, s.Group, s.ServiceAccount} {
			if v != "" {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, field.Invalid(fld.Child("exempt").Index(i), s, "set exactly one of user, group, serviceAccount"))
		}
		if s.ServiceAccount != "" && !validServiceAccountRef(s.ServiceAccount) {
			errs = append(errs, field.Invalid(fld.Child("exempt").Index(i).Child("serviceAccount"), s.ServiceAccount, "must be namespace/name"))
		}
	}
	switch im.GateRBAC {
	case "Warn", "Deny":
	default:
		errs = append(errs, field.NotSupported(fld.Child("gateRBAC"), im.GateRBAC, []string{"Warn", "Deny"}))
	}
	errs = append(errs, validateGate(im, fld)...)
	return errs
}

// UserName is the impersonator's user name: User, or
// system:serviceaccount:<ns>:<name> for ServiceAccount "ns/name".
//
// Errors: neither or both set, or a ServiceAccount not of the form ns/name.
func (p Impersonator) UserName() (string, error) {
	switch {
	case p.User != "" && p.ServiceAccount != "":
		return "", fmt.Errorf("set user or serviceAccount, not both")
	case p.User != "":
		return p.User, nil
	case p.ServiceAccount != "":
		if !validServiceAccountRef(p.ServiceAccount) {
			return "", fmt.Errorf("serviceAccount must be namespace/name, e.g. argocd/argocd-application-controller")
		}
		ns, name, _ := strings.Cut(p.ServiceAccount, "/")
		return "system:serviceaccount:" + ns + ":" + name, nil
	}
	return "", fmt.Errorf("set user or serviceAccount")
}

func validServiceAccountRef(s string) bool {
	ns, name, ok := strings.Cut(s, "/")
	return ok && ns != "" && name != "" && !strings.Contains(name, "/")
}

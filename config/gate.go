package config

import (
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"deputy.dev/deputy/internal/secretfile"
)

// GateSubresource allows sync identities one subresource, for some verbs,
// in their projects' destinations.
type GateSubresource struct {
	// Resource is RESOURCE/SUBRESOURCE, e.g. pods/log; RESOURCE may be "*"
	// (*/status: the status of every resource). Any API group.
	Resource string `json:"resource"`
	// Verbs are the verbs allowed on it (get, list, watch, create, update,
	// patch, delete).
	Verbs []string `json:"verbs"`
}

// DefaultGateSubresources is the default allow-list: reading status, scale
// and Pod logs. Nothing a sync writes is a subresource (server-side apply
// and prune act on the objects themselves), and the dangerous ones (exec,
// attach, portforward, proxy, serviceaccounts/token, ephemeralcontainers,
// eviction, and every write) are left out; an operator who lists one gives
// every sync identity of every project that power in its destinations.
func DefaultGateSubresources() []GateSubresource {
	return []GateSubresource{
		{Resource: "*/status", Verbs: []string{"get"}},
		{Resource: "*/scale", Verbs: []string{"get"}},
		{Resource: "pods/log", Verbs: []string{"get"}},
	}
}

// gateVerbs are the verbs a subresource entry may name: those a sync uses.
var gateVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// serviceAccountNamespaceFile is where a Pod finds its namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// maxNamespaceFileBytes caps serviceAccountNamespaceFile: a namespace name
// has at most 63 characters.
const maxNamespaceFileBytes = 1 << 10

// OwnNamespace is deputy's own namespace: the POD_NAMESPACE environment
// variable (the manifests set it from the downward API), else the in-cluster
// ServiceAccount's namespace file, else deputy-system. It is where the
// AppProjects that grant impersonation and that deputy's Applications use
// live by default, and where the sync Lease is held.
func OwnNamespace() string {
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := secretfile.ReadTrimmed(serviceAccountNamespaceFile, maxNamespaceFileBytes); err == nil && len(b) > 0 {
		return string(b)
	}
	return DefaultLeaseNamespace
}

// defaultImpersonatorNamespaces gives every impersonator that reads
// deputy.dev AppProjects (the default, or listed) and names no project
// namespaces the namespaces deputy's own Applications take their projects
// from (sync.projectNamespaces): one setting decides both where deputy's
// engine looks for an Application's project and where the gate reads the
// projects that let deputy impersonate. Impersonators of other groups only
// (Argo CD's controller) keep SetImpersonationDefaults' default.
func defaultImpersonatorNamespaces(im *Impersonation, projectNamespaces []string) {
	if im.Impersonators == nil {
		im.Impersonators = []Impersonator{{ServiceAccount: DefaultSyncServiceAccount}}
	}
	for i := range im.Impersonators {
		p := &im.Impersonators[i]
		if len(p.Projects.Namespaces) == 0 && (len(p.Projects.APIGroups) == 0 || slices.Contains(p.Projects.APIGroups, "deputy.dev")) {
			p.Projects.Namespaces = slices.Clone(projectNamespaces)
		}
	}
}

func setGateDefaults(im *Impersonation) {
	if im.RequireConstrained == nil {
		t := true
		im.RequireConstrained = &t
	}
	if im.Subresources == nil {
		im.Subresources = DefaultGateSubresources()
	}
}

func validateGate(im *Impersonation, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, s := range im.Subresources {
		f := fld.Child("subresources").Index(i)
		res, sub, ok := strings.Cut(s.Resource, "/")
		if !ok || res == "" || sub == "" || strings.Contains(sub, "/") || sub == "*" {
			errs = append(errs, field.Invalid(f.Child("resource"), s.Resource, "must be RESOURCE/SUBRESOURCE, e.g. pods/log or */status (RESOURCE may be *, SUBRESOURCE may not)"))
		}
		if len(s.Verbs) == 0 {
			errs = append(errs, field.Required(f.Child("verbs"), "name the verbs, e.g. [get]"))
		}
		for j, v := range s.Verbs {
			if !slices.Contains(gateVerbs, v) {
				errs = append(errs, field.NotSupported(f.Child("verbs").Index(j), v, gateVerbs))
			}
		}
	}
	for i, p := range im.Impersonators {
		errs = append(errs, validateNamespaceList(p.Projects.Namespaces, fld.Child("impersonators").Index(i).Child("projects", "namespaces"))...)
	}
	return errs
}

// validateNamespaceList checks a list of namespace names, or ["*"].
func validateNamespaceList(list []string, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, ns := range list {
		if ns == "*" {
			if len(list) > 1 {
				errs = append(errs, field.Invalid(fld.Index(i), ns, `"*" (every namespace) must be the only entry`))
			}
			continue
		}
		for _, msg := range validation.ValidateNamespaceName(ns, false) {
			errs = append(errs, field.Invalid(fld.Index(i), ns, msg))
		}
	}
	return errs
}

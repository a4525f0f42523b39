package authorizer

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The grammar of kube-apiserver's impersonation checks, as its impersonation
// filters ask an authorizer (k8s.io/apiserver/pkg/endpoints/filters/impersonation,
// mode.go): the verbs, the constrained modes and the targets each check names.
// The gate decides by it; the RBAC admission lint (package webhook) finds
// with it the rules that grant impersonation.

// Impersonation verbs and verb prefixes.
const (
	// VerbImpersonate is legacy impersonation.
	VerbImpersonate = "impersonate"
	// VerbPrefixImpersonateMode starts impersonate:<mode>, constrained
	// impersonation of a target.
	VerbPrefixImpersonateMode = "impersonate:"
	// VerbPrefixImpersonateOn starts impersonate-on:<mode>:<verb>, the
	// check of the request made while impersonating in <mode>; it carries
	// the real request's group, resource, namespace, name or path.
	VerbPrefixImpersonateOn = "impersonate-on:"
)

// AuthenticationGroup is the API group of every constrained impersonation
// check and of the legacy uids and userextras checks.
const AuthenticationGroup = "authentication.k8s.io"

// UserExtrasResource is the one impersonation target checked with a
// subresource: userextras/<key>, the extra's key.
const UserExtrasResource = "userextras"

// ImpersonationKind is the kind of an impersonation check, told by its verb.
type ImpersonationKind int

const (
	// NotImpersonation is any other verb.
	NotImpersonation ImpersonationKind = iota
	// LegacyImpersonate is the verb impersonate.
	LegacyImpersonate
	// ConstrainedImpersonate is a verb impersonate:<mode>.
	ConstrainedImpersonate
	// ImpersonateOn is a verb impersonate-on:<mode>:<verb>.
	ImpersonateOn
)

// modeResources are the resources kube-apiserver's constrained impersonation
// checks with each impersonate:<mode> verb, all in group
// authentication.k8s.io (k8s.io/apiserver/pkg/endpoints/filters/impersonation
// mode.go): the modes deputy knows, and nothing else.
var modeResources = map[string][]string{
	"serviceaccount":  {"serviceaccounts"},
	"user-info":       {"users", "groups", "uids", UserExtrasResource},
	"arbitrary-node":  {"nodes"},
	"associated-node": {"nodes"},
}

// legacyTargets are the resources legacy impersonate checks, per group:
// users, groups and serviceaccounts in the core group, uids and
// userextras/<key> in authentication.k8s.io.
var legacyTargets = map[string][]string{
	"":                  {"users", "groups", "serviceaccounts"},
	AuthenticationGroup: {"uids", UserExtrasResource},
}

// targets is legacyTargets with every mode's resources added to
// authentication.k8s.io: what ImpersonationTargets returns.
var targets = func() map[string][]string {
	m := map[string][]string{"": slices.Clone(legacyTargets[""])}
	auth := slices.Clone(legacyTargets[AuthenticationGroup])
	for _, mode := range slices.Sorted(maps.Keys(modeResources)) {
		for _, r := range modeResources[mode] {
			if !slices.Contains(auth, r) {
				auth = append(auth, r)
			}
		}
	}
	m[AuthenticationGroup] = auth
	return m
}()

// ParseImpersonationVerb classifies a verb by its spelling alone: mode is ""
// for legacy impersonate, onVerb the real request's verb for impersonate-on.
// The mode is not checked against the modes deputy knows.
func ParseImpersonationVerb(verb string) (kind ImpersonationKind, mode, onVerb string) {
	switch {
	case verb == VerbImpersonate:
		return LegacyImpersonate, "", ""
	case strings.HasPrefix(verb, VerbPrefixImpersonateMode):
		return ConstrainedImpersonate, verb[len(VerbPrefixImpersonateMode):], ""
	case strings.HasPrefix(verb, VerbPrefixImpersonateOn):
		mode, onVerb, _ := strings.Cut(verb[len(VerbPrefixImpersonateOn):], ":")
		return ImpersonateOn, mode, onVerb
	}
	return NotImpersonation, "", ""
}

// ImpersonationTargets returns the resources of group that some legacy or
// constrained impersonation check names: users, groups and serviceaccounts
// for the core group ""; users, groups, serviceaccounts, nodes, uids and
// userextras for authentication.k8s.io; nil for any other group (RBAC's "*"
// is not a group here: it covers both). The slice is a copy.
func ImpersonationTargets(group string) []string {
	return slices.Clone(targets[group])
}

// classifyImpersonation returns the kind of an impersonation check only when
// the attributes have a shape kube-apiserver's impersonation filters send
// (k8s.io/apiserver/pkg/endpoints/filters/impersonation): legacy impersonate
// on users, groups, serviceaccounts (group "") or uids, userextras/<key>
// (authentication.k8s.io); impersonate:<mode> of a known mode on that
// mode's resources in authentication.k8s.io; impersonate-on:<mode>:<verb> of
// a known mode. Anything else (impersonate on jobs.batch, on a non-resource
// path, an unknown mode) is NotImpersonation: kube-apiserver never asks it
// while impersonating, and the gate leaves it to the authorizers after it.
func classifyImpersonation(a authorizer.Attributes) (kind ImpersonationKind, mode, onVerb string) {
	kind, mode, onVerb = ParseImpersonationVerb(a.GetVerb())
	group, resource, sub := a.GetAPIGroup(), a.GetResource(), a.GetSubresource()
	subOK := sub == "" || resource == UserExtrasResource
	switch kind {
	case LegacyImpersonate:
		if !a.IsResourceRequest() || !subOK || !slices.Contains(legacyTargets[group], resource) {
			return NotImpersonation, "", ""
		}
	case ConstrainedImpersonate:
		if !a.IsResourceRequest() || !subOK || group != AuthenticationGroup || !slices.Contains(modeResources[mode], resource) {
			return NotImpersonation, "", ""
		}
	case ImpersonateOn:
		if modeResources[mode] == nil || onVerb == "" || strings.Contains(onVerb, ":") {
			return NotImpersonation, "", ""
		}
	}
	return kind, mode, onVerb
}

// Impersonation shapes: the bounded label ImpersonationShape gives a
// request's attributes, for metrics and decision logs.
const (
	// ShapeNone is a request that is not an impersonation check.
	ShapeNone = "none"
	// ShapeOther ends a shape whose mode or target deputy does not know,
	// e.g. "constrained:other".
	ShapeOther = "other"
)

// shapes are every impersonation shape but ShapeNone, precomputed so that
// ImpersonationShape does not allocate: "legacy:<target>" by group and
// resource, "constrained:<mode>" and "on:<mode>" by mode.
var shapes = func() (m struct {
	legacy          map[string]map[string]string
	constrained, on map[string]string
}) {
	m.legacy, m.constrained, m.on = map[string]map[string]string{}, map[string]string{}, map[string]string{}
	for group, resources := range legacyTargets {
		m.legacy[group] = map[string]string{}
		for _, r := range resources {
			m.legacy[group][r] = "legacy:" + r
		}
	}
	for mode := range modeResources {
		m.constrained[mode] = "constrained:" + mode
		m.on[mode] = "on:" + mode
	}
	return m
}()

// ImpersonationShapes lists every value ImpersonationShape returns, sorted.
func ImpersonationShapes() []string {
	out := []string{ShapeNone, "legacy:" + ShapeOther, "constrained:" + ShapeOther, "on:" + ShapeOther}
	for _, m := range append(slices.Collect(maps.Values(shapes.legacy)), shapes.constrained, shapes.on) {
		for _, v := range m {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// ImpersonationShape is a bounded label of the impersonation check a
// request's attributes make, by the grammar of kube-apiserver's
// impersonation filters (k8s.io/apiserver/pkg/endpoints/filters/impersonation):
//
//   - "none": any verb but impersonate, impersonate:<mode> and
//     impersonate-on:<mode>:<verb>;
//   - "legacy:<target>": verb impersonate on users, groups or
//     serviceaccounts (group "") or uids or userextras (authentication.k8s.io);
//   - "constrained:<mode>": verb impersonate:<mode> for the modes
//     serviceaccount, user-info, arbitrary-node and associated-node;
//   - "on:<mode>": verb impersonate-on:<mode>:<verb> of those modes (the
//     real request's verb is not part of the label).
//
// A target or mode outside those lists gives "legacy:other",
// "constrained:other" or "on:other". ImpersonationShapes lists every value.
// It does not allocate.
func ImpersonationShape(a authorizer.Attributes) string {
	kind, mode, _ := ParseImpersonationVerb(a.GetVerb())
	var s string
	var ok bool
	switch kind {
	case NotImpersonation:
		return ShapeNone
	case LegacyImpersonate:
		if a.IsResourceRequest() {
			s, ok = shapes.legacy[a.GetAPIGroup()][a.GetResource()]
		}
		if !ok {
			s = "legacy:" + ShapeOther
		}
	case ConstrainedImpersonate:
		if s, ok = shapes.constrained[mode]; !ok {
			s = "constrained:" + ShapeOther
		}
	case ImpersonateOn:
		if s, ok = shapes.on[mode]; !ok {
			s = "on:" + ShapeOther
		}
	}
	return s
}

package policy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"deputy.dev/deputy/policy/v1alpha1"
)

// This file holds AppProject validation: Argo CD's ValidateProject
// (pkg/apis/application/v1alpha1/app_project_types.go) and deputy's stricter
// rules.

// ValidateAppProject checks an AppProject the way Argo CD's ValidateProject does
// (argo-cd pkg/apis/application/v1alpha1/app_project_types.go,
// (*AppProject).ValidateProject), plus deputy's stricter rules, and returns
// every problem at once instead of the first one.
//
// Errors carry field paths such as
// spec.destinationServiceAccounts[2].defaultServiceAccount. Upstream rules
// keep upstream's messages verbatim:
//   - destinations: name, server or namespace equal to "!*" ("server has an
//     invalid format, '!*'"); a repeated destination ("destination '<server or
//     name>/<namespace>' already added");
//   - sourceNamespaces repeated ("source namespace '<ns>' already added");
//   - sourceRepos: "!*" ("source repository has an invalid format, '!*'") or
//     repeated ("source repository '<repo>' already added");
//   - roles: repeated role names, and repeated policies or groups in a role;
//   - destinationServiceAccounts: server or namespace containing "!" or not a
//     valid glob ("server has an invalid format, '<v>'", "namespace has an
//     invalid format, '<v>'"); defaultServiceAccount empty after trimming
//     spaces or containing any of !*[]{}\/ ("defaultServiceAccount has an
//     invalid format, '<v>'"); a repeated (server, namespace)
//     ("destinationServiceAccount '<server>/<namespace>' already added").
//
// deputy is stricter: destination server, name and namespace must be valid
// globs (after one leading "!") that gobwas/glob can match without crashing;
// every server, name and namespace pattern is at most 256 bytes; duplicates are found by comparing the
// (server, namespace) pair, not the "server/namespace" string, so "a/b"+"c"
// and "a"+"b/c" are two entries; a defaultServiceAccount is "name" or
// "namespace:name" with exactly one colon, a non-empty namespace that is a
// DNS-1123 label and a name that is a DNS-1123 subdomain (what Kubernetes
// requires of namespaces and ServiceAccount names); a role group may not
// start with "system:" (deputy reserves Kubernetes' built-in groups,
// system:masters among them; role groups name the OIDC groups granted the
// role, as in Argo CD, and project tokens never carry them).
//
// Warnings name destinationServiceAccounts entries that can never be chosen
// because an earlier entry matches every destination they match (the first
// match wins). They are reported only when provable: the earlier server and
// namespace patterns are each "*" (or only stars), identical to the later
// ones, or match the later pattern when it is a literal. Patterns with more
// than four '*' wildcards are warned about too: gobwas/glob's worst-case match
// time grows exponentially with them.
//
// Upstream checks deputy does not repeat: role name and group name syntax and
// the Casbin policy syntax (deputy reads role groups, not policies), and sync
// windows (deputy's type has none). A nil project has no errors.
func ValidateAppProject(p *v1alpha1.AppProject) (field.ErrorList, []string) {
	if p == nil {
		return nil, nil
	}
	spec := field.NewPath("spec")
	var errs field.ErrorList
	errs = append(errs, projectValidateDestinations(p.Spec.Destinations, spec.Child("destinations"))...)
	errs = append(errs, projectValidateSourceNamespaces(p.Spec.SourceNamespaces, spec.Child("sourceNamespaces"))...)
	errs = append(errs, projectValidateSourceRepos(p.Spec.SourceRepos, spec.Child("sourceRepos"))...)
	errs = append(errs, projectValidateRoles(p.Spec.Roles, spec.Child("roles"))...)
	saErrs, warnings := projectValidateDestinationServiceAccounts(p.Spec.DestinationServiceAccounts, spec.Child("destinationServiceAccounts"))
	errs = append(errs, saErrs...)
	return errs, warnings
}

// projectDestinationKey is a destination's identity for the duplicate check:
// upstream keys on "server/namespace", or "name/namespace" when only the name
// is set.
type projectDestinationKey struct {
	byName    bool
	cluster   string
	namespace string
}

func projectValidateDestinations(dests []v1alpha1.ApplicationDestination, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := make(map[projectDestinationKey]bool, len(dests))
	for i, d := range dests {
		idx := fld.Index(i)
		errs = append(errs, projectValidateDestinationGlob("name", d.Name, idx.Child("name"))...)
		errs = append(errs, projectValidateDestinationGlob("server", d.Server, idx.Child("server"))...)
		errs = append(errs, projectValidateDestinationGlob("namespace", d.Namespace, idx.Child("namespace"))...)

		key := projectDestinationKey{cluster: d.Server, namespace: d.Namespace}
		if d.Server == "" && d.Name != "" {
			key = projectDestinationKey{byName: true, cluster: d.Name, namespace: d.Namespace}
		}
		if seen[key] {
			e := field.Duplicate(idx, d)
			e.Detail = fmt.Sprintf("destination '%s/%s' already added", key.cluster, key.namespace)
			errs = append(errs, e)
			continue
		}
		seen[key] = true
	}
	return errs
}

// projectValidateDestinationGlob applies upstream's "!*" rule and deputy's
// "must compile" rule to one destination field (Argo CD matches these with
// util/glob.Match, which treats a pattern that does not compile as matching
// nothing, silently).
func projectValidateDestinationGlob(name, pattern string, fld *field.Path) field.ErrorList {
	if pattern == "!*" {
		return field.ErrorList{field.Invalid(fld, pattern, fmt.Sprintf("%s has an invalid format, '!*'", name))}
	}
	if len(pattern) > projectMaxPatternLength {
		return field.ErrorList{projectPatternTooLong(fld, name, pattern)}
	}
	if _, err := projectCompileGlob(strings.TrimPrefix(pattern, "!")); err != nil {
		return field.ErrorList{field.Invalid(fld, pattern, fmt.Sprintf(
			"%s is not a valid glob pattern (%v): fix the pattern or escape the metacharacter with a backslash (gobwas/glob syntax: * ? [a-z] {a,b}; a leading ! negates)",
			name, err))}
	}
	return nil
}

func projectValidateSourceNamespaces(namespaces []string, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := make(map[string]bool, len(namespaces))
	for i, ns := range namespaces {
		if seen[ns] {
			e := field.Duplicate(fld.Index(i), ns)
			e.Detail = fmt.Sprintf("source namespace '%s' already added", ns)
			errs = append(errs, e)
			continue
		}
		seen[ns] = true
	}
	return errs
}

func projectValidateSourceRepos(repos []string, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := make(map[string]bool, len(repos))
	for i, repo := range repos {
		if repo == "!*" {
			errs = append(errs, field.Invalid(fld.Index(i), repo, "source repository has an invalid format, '!*'"))
			continue
		}
		if seen[repo] {
			e := field.Duplicate(fld.Index(i), repo)
			e.Detail = fmt.Sprintf("source repository '%s' already added", repo)
			errs = append(errs, e)
			continue
		}
		seen[repo] = true
	}
	return errs
}

func projectValidateRoles(roles []v1alpha1.ProjectRole, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := make(map[string]bool, len(roles))
	for i, role := range roles {
		idx := fld.Index(i)
		if names[role.Name] {
			e := field.Duplicate(idx.Child("name"), role.Name)
			e.Detail = fmt.Sprintf("role '%s' already exists", role.Name)
			errs = append(errs, e)
		}
		names[role.Name] = true
		policies := make(map[string]bool, len(role.Policies))
		for j, policy := range role.Policies {
			if policies[policy] {
				e := field.Duplicate(idx.Child("policies").Index(j), policy)
				e.Detail = fmt.Sprintf("policy '%s' already exists for role '%s'", policy, role.Name)
				errs = append(errs, e)
			}
			policies[policy] = true
		}
		groups := make(map[string]bool, len(role.Groups))
		for j, group := range role.Groups {
			if groups[group] {
				e := field.Duplicate(idx.Child("groups").Index(j), group)
				e.Detail = fmt.Sprintf("group '%s' already exists for role '%s'", group, role.Name)
				errs = append(errs, e)
			}
			groups[group] = true
			if strings.HasPrefix(group, "system:") {
				errs = append(errs, field.Invalid(idx.Child("groups").Index(j), group,
					"a role may not name a Kubernetes system: group (system:masters is cluster-admin): deputy reserves them; project tokens carry only the group deputy:project:NAMESPACE/NAME, which is what RBAC should bind"))
			}
		}
	}
	return errs
}

// saDestinationKey is the (server, namespace) pair of a
// destinationServiceAccounts entry; it is also the value shown in a
// Duplicate error.
type saDestinationKey struct {
	Server    string `json:"server"`
	Namespace string `json:"namespace"`
}

func projectValidateDestinationServiceAccounts(entries []v1alpha1.ApplicationDestinationServiceAccount, fld *field.Path) (field.ErrorList, []string) {
	var errs field.ErrorList
	compiled := make([]saEntry, len(entries))
	usable := make([]bool, len(entries)) // both globs compile and the pair is not a duplicate
	seen := make(map[saDestinationKey]int, len(entries))
	for i, e := range entries {
		idx := fld.Index(i)
		compiled[i] = saCompileEntry(e)
		ok := true
		if fe := saValidatePattern("server", e.Server, compiled[i].serverErr, idx.Child("server")); fe != nil {
			errs = append(errs, fe)
			ok = false
		}
		if fe := saValidatePattern("namespace", e.Namespace, compiled[i].namespaceErr, idx.Child("namespace")); fe != nil {
			errs = append(errs, fe)
			ok = false
		}
		errs = append(errs, saValidateDefaultServiceAccount(e.DefaultServiceAccount, idx.Child("defaultServiceAccount"))...)

		key := saDestinationKey{Server: e.Server, Namespace: e.Namespace}
		if _, dup := seen[key]; dup {
			d := field.Duplicate(idx, key)
			d.Detail = fmt.Sprintf("destinationServiceAccount '%s/%s' already added", e.Server, e.Namespace)
			errs = append(errs, d)
			ok = false
		} else {
			seen[key] = i
		}
		usable[i] = ok
	}
	warnings := saShadowWarnings(entries, compiled, usable, fld)
	for i, e := range entries {
		warnings = append(warnings, saStarWarnings(e.Server, fld.Index(i).Child("server"))...)
		warnings = append(warnings, saStarWarnings(e.Namespace, fld.Index(i).Child("namespace"))...)
	}
	return errs, warnings
}

// Fixes appended to Argo CD's messages (which are kept verbatim first, so users
// recognise them).
const (
	saBangHint                  = ": destinationServiceAccounts do not support '!' negation; list the namespaces or use a glob such as team-*"
	saDefaultServiceAccountHint = ": name one ServiceAccount, as NAME (in the destination namespace) or NAMESPACE:NAME; wildcards, '!', brackets, braces and slashes are not allowed"
)

// saValidatePattern is upstream's server/namespace rule ("!" anywhere, or a
// pattern that does not compile), with deputy's length bound checked first
// under its own message.
func saValidatePattern(name, pattern string, compileErr error, fld *field.Path) *field.Error {
	switch {
	case strings.Contains(pattern, "!"):
		return field.Invalid(fld, pattern, fmt.Sprintf("%s has an invalid format, '%s'"+saBangHint, name, pattern))
	case len(pattern) > projectMaxPatternLength:
		return projectPatternTooLong(fld, name, pattern)
	case compileErr != nil:
		return field.Invalid(fld, pattern, fmt.Sprintf("%s has an invalid format, '%s'", name, pattern))
	}
	return nil
}

func projectPatternTooLong(fld *field.Path, name, pattern string) *field.Error {
	e := field.TooLong(fld, pattern, projectMaxPatternLength)
	e.Detail = fmt.Sprintf("the %s pattern is %d bytes long; deputy accepts at most %d (glob compile time grows faster than quadratically with length): shorten it",
		name, len(pattern), projectMaxPatternLength)
	return e
}

// saStarWarnings warns about a pattern whose number of '*' wildcards makes
// gobwas/glob's backtracking matcher slow on unlucky inputs.
func saStarWarnings(pattern string, fld *field.Path) []string {
	stars := 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '*':
			stars++
			for i+1 < len(pattern) && pattern[i+1] == '*' {
				i++
			}
		}
	}
	if stars <= saMaxStars {
		return nil
	}
	return []string{fmt.Sprintf("%s %q has %d '*' wildcards: gobwas/glob (the matcher Argo CD uses) can take time exponential in their number to match it; use at most %d",
		fld, pattern, stars, saMaxStars)}
}

// saShadowWarnings reports entries that the first-match walk can never reach
// because one earlier entry provably matches every (server, namespace) they
// match. Only usable entries take part: an entry whose pattern is an error is
// already reported, and an exact duplicate is an error, not a warning.
func saShadowWarnings(entries []v1alpha1.ApplicationDestinationServiceAccount, compiled []saEntry, usable []bool, fld *field.Path) []string {
	var warnings []string
	for j := range entries {
		if !usable[j] {
			continue
		}
		for i := 0; i < j; i++ {
			if !usable[i] {
				continue
			}
			if !saPatternCovers(&compiled[i].server, entries[j].Server) || !saPatternCovers(&compiled[i].namespace, entries[j].Namespace) {
				continue
			}
			warnings = append(warnings, fmt.Sprintf(
				"%s (server %q, namespace %q) can never be used: %s (server %q, namespace %q) matches every destination it matches and the first match wins; remove entry %d or move it above entry %d",
				fld.Index(j), entries[j].Server, entries[j].Namespace,
				fld.Index(i), entries[i].Server, entries[i].Namespace, j, i))
			break
		}
	}
	return warnings
}

// saPatternCovers reports whether the earlier pattern provably matches every
// string the later pattern matches. It answers false when it cannot prove it.
func saPatternCovers(earlier *saPattern, later string) bool {
	if earlier.any || earlier.source == later {
		return true
	}
	if !strings.ContainsAny(later, projectGlobMeta) {
		matched, err := earlier.match(later)
		return err == nil && matched
	}
	return false
}

// saValidateDefaultServiceAccount reports upstream's rule with upstream's
// message, or else each of deputy's stricter problems.
func saValidateDefaultServiceAccount(sa string, fld *field.Path) field.ErrorList {
	_, _, upstreamInvalid, problems := saParseDefaultServiceAccount(sa)
	if upstreamInvalid {
		// Argo CD's message first, so users recognise it; then the fix.
		return field.ErrorList{field.Invalid(fld, sa, fmt.Sprintf("defaultServiceAccount has an invalid format, '%s'"+saDefaultServiceAccountHint, sa))}
	}
	var errs field.ErrorList
	for _, p := range problems {
		errs = append(errs, field.Invalid(fld, sa, p))
	}
	return errs
}

// saParseDefaultServiceAccount splits a defaultServiceAccount into its
// namespace (empty for the bare "name" form) and name. upstreamInvalid is
// Argo CD's rule (blank after trimming spaces, or any of !*[]{}\/); problems
// are deputy's, each a sentence saying what is wrong and how to fix it.
func saParseDefaultServiceAccount(sa string) (namespace, name string, upstreamInvalid bool, problems []string) {
	if strings.Trim(sa, " ") == "" || strings.ContainsAny(sa, saDisallowedChars) {
		return "", "", true, nil
	}
	switch n := strings.Count(sa, ":"); {
	case n == 0:
		name = sa
	case n > 1:
		return "", "", false, []string{fmt.Sprintf(
			"has %d colons: write \"name\" for a ServiceAccount in the Application's destination namespace, or \"namespace:name\" with exactly one colon", n)}
	default:
		namespace, name, _ = strings.Cut(sa, ":")
		if namespace == "" {
			problems = append(problems,
				"the namespace before the colon is empty: write \"namespace:name\", or just \"name\" for a ServiceAccount in the Application's destination namespace")
		} else if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
			problems = append(problems, fmt.Sprintf("namespace %q is not a valid Kubernetes namespace name (%s)%s",
				namespace, strings.Join(msgs, "; "), saSuggest(namespace, validation.DNS1123LabelMaxLength, false)))
		}
		if name == "" {
			problems = append(problems, "the ServiceAccount name after the colon is empty: write \"namespace:name\"")
			return namespace, name, false, problems
		}
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		problems = append(problems, fmt.Sprintf("ServiceAccount name %q is not a valid Kubernetes ServiceAccount name (%s)%s",
			name, strings.Join(msgs, "; "), saSuggest(name, validation.DNS1123SubdomainMaxLength, true)))
	}
	return namespace, name, false, problems
}

// saSuggest proposes a valid name close to an invalid one (lower-cased,
// other characters turned into '-'), as the fix part of a message.
func saSuggest(s string, maxLen int, dots bool) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || dots && c == '.') {
			b[i] = '-'
		}
	}
	out := strings.Trim(string(b), "-.")
	if len(out) > maxLen {
		out = strings.Trim(out[:maxLen], "-.")
	}
	var msgs []string
	if dots {
		msgs = validation.IsDNS1123Subdomain(out)
	} else {
		msgs = validation.IsDNS1123Label(out)
	}
	if out == "" || len(msgs) > 0 {
		return ": use lower-case letters, digits and '-'"
	}
	return fmt.Sprintf(": use lower-case letters, digits and '-', e.g. %q", out)
}

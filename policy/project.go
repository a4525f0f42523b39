package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gobwas/glob"
	"github.com/gobwas/glob/match"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"deputy.dev/deputy/policy/v1alpha1"
)

// This file holds AppProject validation and the Project → ServiceAccount
// derivation. The semantics are Argo CD's (argoproj/argo-cd v3,
// pkg/apis/application/v1alpha1/app_project_types.go ValidateProject and
// util/settings/impersonation.go DeriveServiceAccountToImpersonate, the same
// logic as controller/sync.go deriveServiceAccountToImpersonate); where deputy
// is stricter, the doc comment says so.

const (
	// saUsernamePrefix is the prefix of a ServiceAccount's username.
	saUsernamePrefix = "system:serviceaccount:"

	// saDisallowedChars is upstream's serviceAccountDisallowedCharSet: no glob
	// metacharacter, negation or path separator in a defaultServiceAccount.
	saDisallowedChars = "!*[]{}\\/"

	// projectGlobMeta are the characters that make a gobwas/glob pattern more
	// than a literal (syntax.Special). A pattern without any of them matches
	// exactly itself.
	projectGlobMeta = "*?[]{}\\"

	// projectMaxPatternLength bounds a server, name or namespace pattern:
	// gobwas/glob's compile time grows faster than quadratically with the
	// pattern (a 512-character one can take over 100 ms), and a real server
	// URL or namespace pattern is far shorter.
	projectMaxPatternLength = 256

	// saMaxStars is how many '*' wildcards a destinationServiceAccounts pattern
	// may hold before a warning: gobwas/glob backtracks, and its worst-case
	// match time roughly doubles with each one (four take ~60 µs on a
	// 253-character input, ten take milliseconds).
	saMaxStars = 4

	// saMaxNamespaceLength and saMaxServerLength bound the derivation's
	// inputs: no namespace is longer than a DNS-1123 subdomain, and a longer
	// input only lengthens worst-case glob matching.
	saMaxNamespaceLength = validation.DNS1123SubdomainMaxLength
	saMaxServerLength    = 2048
)

// ErrNoMatchingServiceAccount is matched (errors.Is) by the error of
// EnforcedServiceAccountError.
var ErrNoMatchingServiceAccount = errors.New("no matching service account found")

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

// saPattern is one compiled server or namespace pattern of a
// destinationServiceAccounts entry.
type saPattern struct {
	source  string
	any     bool // only stars: matches every string (no separators)
	literal bool // no metacharacter: matches exactly source
	g       glob.Glob
}

func (p *saPattern) match(s string) (bool, error) {
	switch {
	case p.any:
		return true, nil
	case p.literal:
		return s == p.source, nil
	}
	return saSafeMatch(p.g, p.source, s)
}

// saEntry is a compiled destinationServiceAccounts entry. Errors are kept per
// entry so that the first-match walk reports them only when it reaches the
// entry, as upstream does.
type saEntry struct {
	server, namespace       saPattern
	serverErr, namespaceErr error
	saErr                   error  // defaultServiceAccount invalid (upstream or deputy rule)
	saNamespace             string // "" for the bare "name" form
	saName                  string
	username                string // precomputed for the "namespace:name" form
}

// projectCompileGlob compiles a pattern the way Argo CD's util/glob.Match does
// here: gobwas/glob with no separators, so '*' also matches '/', '.' and ':'.
//
// gobwas/glob v0.2.3 compiles some patterns (an unterminated or empty "{}"
// alternative such as "a{" or "a{}", or "{0*0*0,0}") into a fixed-length row
// holding a matcher of length zero or less, whose Match panics with "slice
// bounds out of range" on short inputs; Argo CD would crash on them. Such
// patterns are an error here, as is a panic inside the compiler.
func projectCompileGlob(pattern string) (g glob.Glob, err error) {
	defer func() {
		if r := recover(); r != nil {
			g, err = nil, fmt.Errorf("glob compiler failed: %v", r)
		}
	}()
	g, err = glob.Compile(pattern)
	if err != nil {
		return nil, err
	}
	if m, ok := g.(match.Matcher); ok && projectGlobHasRowBug(m) {
		return nil, errors.New("the pattern hits a gobwas/glob bug that crashes matching (an empty or unterminated {} alternative): rewrite it")
	}
	return g, nil
}

// projectGlobHasRowBug reports whether a compiled matcher tree holds a Row
// with a sub-matcher whose length is not positive (match.Row.matchAll then
// slices past the end of its input).
func projectGlobHasRowBug(m match.Matcher) bool {
	switch t := m.(type) {
	case match.Row:
		for _, sub := range t.Matchers {
			if sub == nil || sub.Len() <= 0 || projectGlobHasRowBug(sub) {
				return true
			}
		}
	case match.AnyOf:
		for _, sub := range t.Matchers {
			if sub != nil && projectGlobHasRowBug(sub) {
				return true
			}
		}
	case match.EveryOf:
		for _, sub := range t.Matchers {
			if sub != nil && projectGlobHasRowBug(sub) {
				return true
			}
		}
	case match.BTree:
		for _, sub := range []match.Matcher{t.Value, t.Left, t.Right} {
			if sub != nil && projectGlobHasRowBug(sub) {
				return true
			}
		}
	}
	return false
}

// saSafeMatch is g.Match(s) that turns a panic inside gobwas/glob into an
// error, so a matcher bug that projectCompileGlob does not know about fails
// the decision closed instead of crashing deputy.
func saSafeMatch(g glob.Glob, pattern, s string) (matched bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			matched, err = false, fmt.Errorf("glob pattern %q failed to match %q: %v", pattern, s, r)
		}
	}()
	return g.Match(s), nil
}

func saCompilePattern(pattern string) (saPattern, error) {
	p := saPattern{source: pattern}
	if len(pattern) > projectMaxPatternLength {
		return p, fmt.Errorf("the pattern is %d bytes long, more than the %d deputy accepts", len(pattern), projectMaxPatternLength)
	}
	switch {
	case pattern != "" && strings.Trim(pattern, "*") == "":
		p.any = true
		return p, nil
	case !strings.ContainsAny(pattern, projectGlobMeta):
		p.literal = true
		return p, nil
	}
	g, err := projectCompileGlob(pattern)
	if err != nil {
		return p, err
	}
	p.g = g
	return p, nil
}

func saCompileEntry(e v1alpha1.ApplicationDestinationServiceAccount) saEntry {
	var c saEntry
	c.server, c.serverErr = saCompilePattern(e.Server)
	c.namespace, c.namespaceErr = saCompilePattern(e.Namespace)
	c.compileServiceAccount(e.DefaultServiceAccount)
	return c
}

// compileServiceAccount parses the entry's defaultServiceAccount once, so a
// derivation only picks the precomputed result.
func (c *saEntry) compileServiceAccount(sa string) {
	ns, name, upstreamInvalid, problems := saParseDefaultServiceAccount(sa)
	switch {
	case upstreamInvalid:
		c.saErr = fmt.Errorf("default service account contains invalid chars '%s'", sa)
	case len(problems) > 0:
		c.saErr = fmt.Errorf("defaultServiceAccount %q is invalid: %s", sa, strings.Join(problems, "; "))
	default:
		c.saNamespace, c.saName = ns, name
		if ns != "" {
			c.username = saUsernamePrefix + ns + ":" + name
		}
	}
}

// matches is one step of upstream's walk: a pattern that does not compile
// is an error when the walk reaches it, whether or not the other matches.
func (c *saEntry) matches(destServer, destNamespace string) (bool, error) {
	if c.serverErr != nil {
		return false, fmt.Errorf("invalid glob pattern for destination server: %w", c.serverErr)
	}
	if c.namespaceErr != nil {
		return false, fmt.Errorf("invalid glob pattern for destination namespace: %w", c.namespaceErr)
	}
	matched, err := c.server.match(destServer)
	if err != nil || !matched {
		return false, err
	}
	return c.namespace.match(destNamespace)
}

// resolve returns the ServiceAccount of a matched entry.
func (c *saEntry) resolve(destNamespace, appNamespace string) (namespace, name string, err error) {
	if c.saErr != nil {
		return "", "", c.saErr
	}
	if c.saNamespace != "" {
		return c.saNamespace, c.saName, nil
	}
	ns := destNamespace
	if ns == "" {
		ns = appNamespace
	}
	if !saIsNamespaceName(ns) {
		return "", "", saNamespaceError(destNamespace, appNamespace, c.saName)
	}
	return ns, c.saName, nil
}

// username is the ServiceAccount username of a resolved entry.
func (c *saEntry) usernameFor(namespace, name string) string {
	if c.username != "" {
		return c.username
	}
	return saUsernamePrefix + namespace + ":" + name
}

// CompiledProject is an AppProject's destinationServiceAccounts with every
// glob compiled, for deriving ServiceAccounts on a hot path: a derivation does
// no compilation and, for entries of the "namespace:name" form, no
// allocation. It is immutable and safe for concurrent use.
type CompiledProject struct {
	name      string
	namespace string
	entries   []saEntry
	dests     []compiledDestination
	sourceNS  []sourceNamespaceMatcher
}

// ProjectMatcher is another name for CompiledProject.
type ProjectMatcher = CompiledProject

// CompileAppProject compiles p's destinationServiceAccounts (server and
// namespace globs with no separators, as Argo CD's util/glob.Match). It
// returns an error naming every entry whose server or namespace pattern does
// not compile (or is longer than 256 bytes, or would crash gobwas/glob), since such a project cannot be evaluated the way Argo CD would
// (its walk fails on reaching that entry); callers fail closed on it. A
// project that ValidateAppProject accepts always compiles. Invalid
// defaultServiceAccount values are not a compile error: deriving through such
// an entry returns its error, as upstream does.
func CompileAppProject(p *v1alpha1.AppProject) (*CompiledProject, error) {
	if p == nil {
		return nil, errors.New("failed to compile AppProject: project is nil")
	}
	c := saCompileProject(p)
	var errs []error
	for i := range c.entries {
		e := &c.entries[i]
		src := p.Spec.DestinationServiceAccounts[i]
		if e.serverErr != nil {
			errs = append(errs, fmt.Errorf("spec.destinationServiceAccounts[%d].server %q is not a valid glob: %w", i, src.Server, e.serverErr))
		}
		if e.namespaceErr != nil {
			errs = append(errs, fmt.Errorf("spec.destinationServiceAccounts[%d].namespace %q is not a valid glob: %w", i, src.Namespace, e.namespaceErr))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("failed to compile AppProject %q: %w", p.Name, errors.Join(errs...))
	}
	return c, nil
}

func saCompileProject(p *v1alpha1.AppProject) *CompiledProject {
	c := &CompiledProject{name: p.Name, namespace: p.Namespace, entries: make([]saEntry, len(p.Spec.DestinationServiceAccounts)),
		dests: compileDestinations(p), sourceNS: compileSourceNamespaces(p.Spec.SourceNamespaces)}
	for i, e := range p.Spec.DestinationServiceAccounts {
		c.entries[i] = saCompileEntry(e)
	}
	return c
}

// Name is the name of the AppProject the matcher was compiled from.
func (c *CompiledProject) Name() string { return c.name }

// Len is the number of destinationServiceAccounts entries.
func (c *CompiledProject) Len() int { return len(c.entries) }

// DeriveRef is Derive returning the ServiceAccount's namespace and name
// instead of its username; it never allocates.
func (c *CompiledProject) DeriveRef(destServer, destNamespace, appNamespace string) (namespace, name string, entryIndex int, err error) {
	if err := saCheckInputs(destServer, destNamespace, appNamespace); err != nil {
		return "", "", -1, err
	}
	for i := range c.entries {
		e := &c.entries[i]
		matched, err := e.matches(destServer, destNamespace)
		if err != nil {
			return "", "", i, err
		}
		if !matched {
			continue
		}
		ns, name, err := e.resolve(destNamespace, appNamespace)
		if err != nil {
			return "", "", i, err
		}
		return ns, name, i, nil
	}
	return "", "", -1, nil
}

// Derive returns the username (system:serviceaccount:<ns>:<name>) of the
// ServiceAccount that a sync to (destServer, destNamespace) of an Application
// living in appNamespace impersonates, and the index of the
// destinationServiceAccounts entry that chose it; "" and -1 with a nil error
// when no entry matches (the caller then applies the enforcement setting,
// see EnforcedServiceAccountError).
//
// Semantics of Argo CD's DeriveServiceAccountToImpersonate (argo-cd
// util/settings/impersonation.go): entries are walked in order and the first
// whose server glob matches destServer (the resolved server URL, also when the
// Application names its cluster) and whose namespace glob matches the raw
// destNamespace wins; "namespace:name" names the ServiceAccount's namespace,
// a bare "name" lives in destNamespace, or appNamespace when destNamespace is
// empty.
//
// Errors, with the entry index: the entry reached has a glob that does not
// compile, is longer than 256 bytes or would crash gobwas/glob (upstream
// "invalid glob pattern for destination server: ..."), its
// defaultServiceAccount breaks upstream's rule (upstream "default service
// account contains invalid chars '<sa>'") or deputy's stricter one (see
// ValidateAppProject). deputy also refuses, where upstream would build a
// username the apiserver cannot parse as a ServiceAccount, a bare name whose
// namespace (destNamespace, else appNamespace) is empty or not a DNS-1123
// label; and, with index -1, a destination server longer than 2048 bytes or a
// namespace longer than 253 (no namespace is; a long input only lengthens
// worst-case matching).
func (c *CompiledProject) Derive(destServer, destNamespace, appNamespace string) (username string, entryIndex int, err error) {
	ns, name, i, err := c.DeriveRef(destServer, destNamespace, appNamespace)
	if err != nil || i < 0 {
		return "", i, err
	}
	return c.entries[i].usernameFor(ns, name), i, nil
}

// DeriveServiceAccount is CompiledProject.Derive for a project that is not
// compiled ahead: it compiles the patterns of the entries it walks on every
// call (use CompileAppProject on a hot path). Unlike CompileAppProject it
// accepts patterns that do not compile and, like upstream, fails only when
// the walk reaches such an entry. A nil project matches nothing.
func DeriveServiceAccount(p *v1alpha1.AppProject, destServer, destNamespace, appNamespace string) (username string, entryIndex int, err error) {
	if p == nil {
		return "", -1, nil
	}
	if err := saCheckInputs(destServer, destNamespace, appNamespace); err != nil {
		return "", -1, err
	}
	for i, raw := range p.Spec.DestinationServiceAccounts {
		var e saEntry
		e.server, e.serverErr = saCompilePattern(raw.Server)
		e.namespace, e.namespaceErr = saCompilePattern(raw.Namespace)
		matched, err := e.matches(destServer, destNamespace)
		if err != nil {
			return "", i, err
		}
		if !matched {
			continue
		}
		e.compileServiceAccount(raw.DefaultServiceAccount)
		ns, name, err := e.resolve(destNamespace, appNamespace)
		if err != nil {
			return "", i, err
		}
		return e.usernameFor(ns, name), i, nil
	}
	return "", -1, nil
}

// EnforcedServiceAccountError is the error that fails a sync when
// impersonation is enforced and no destinationServiceAccounts entry matches:
// upstream's "no matching service account found for destination server %s
// and namespace %s" (argo-cd util/settings/impersonation.go,
// DeriveServiceAccountToImpersonate). Upstream passes the Application's
// spec.destination.server as written (empty when the destination is given by
// name) and the ServiceAccount namespace (destination namespace, or the
// Application's namespace when that is empty). The error matches
// ErrNoMatchingServiceAccount with errors.Is.
func EnforcedServiceAccountError(server, namespace string) error {
	return &saNoMatchError{server: server, namespace: namespace}
}

type saNoMatchError struct {
	server, namespace string
}

func (e *saNoMatchError) Error() string {
	return fmt.Sprintf("no matching service account found for destination server %s and namespace %s", e.server, e.namespace)
}

func (e *saNoMatchError) Is(target error) bool { return target == ErrNoMatchingServiceAccount }

func saNamespaceError(destNamespace, appNamespace, name string) error {
	if destNamespace == "" && appNamespace == "" {
		return fmt.Errorf("cannot derive the namespace of ServiceAccount %q: the destination namespace and the Application's namespace are both empty; set spec.destination.namespace or use \"namespace:name\" in defaultServiceAccount", name)
	}
	ns := destNamespace
	if ns == "" {
		ns = appNamespace
	}
	return fmt.Errorf("cannot derive ServiceAccount %q in namespace %q: not a valid namespace name (a lowercase RFC 1123 label)", name, ns)
}

// saCheckInputs bounds the derivation's inputs (see saMaxNamespaceLength).
func saCheckInputs(destServer, destNamespace, appNamespace string) error {
	switch {
	case len(destServer) > saMaxServerLength:
		return fmt.Errorf("destination server is %d bytes long, more than the %d deputy accepts", len(destServer), saMaxServerLength)
	case len(destNamespace) > saMaxNamespaceLength:
		return fmt.Errorf("destination namespace is %d bytes long; no namespace name is longer than %d", len(destNamespace), saMaxNamespaceLength)
	case len(appNamespace) > saMaxNamespaceLength:
		return fmt.Errorf("application namespace is %d bytes long; no namespace name is longer than %d", len(appNamespace), saMaxNamespaceLength)
	}
	return nil
}

// saIsNamespaceName is validation.IsDNS1123Label without the regular
// expression and the messages, for the derivation hot path.
func saIsNamespaceName(s string) bool {
	if len(s) == 0 || len(s) > validation.DNS1123LabelMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

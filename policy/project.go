package policy

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation"

	"deputy.dev/deputy/policy/v1alpha1"
)

// The AppProject rules live in these files; the semantics are Argo CD's
// (argoproj/argo-cd v3, pkg/apis/application/v1alpha1/app_project_types.go,
// util/settings/impersonation.go, util/git and util/glob), and where deputy is
// stricter the doc comment says so:
//   - project.go: CompiledProject, an AppProject with its globs compiled;
//   - project_glob.go: the one safe way deputy compiles and matches a glob;
//   - project_validate.go: ValidateAppProject;
//   - project_derive.go: the Project → ServiceAccount derivation;
//   - project_sources.go: source repository permission (sourceRepos, Git
//     URL normalisation);
//   - project_gate.go: destination and kind permission, and the inverse of
//     the derivation (which ServiceAccounts a project can make a sync
//     impersonate);
//   - project_namespaces.go: where a project may be used from.

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

// CompiledProject is an AppProject with every glob compiled once
// (destinationServiceAccounts, destinations, sourceNamespaces, and, on first
// use, sourceRepos), for deciding on a hot path: a derivation does no
// compilation and, for entries of the "namespace:name" form, no allocation.
// It is immutable and safe for concurrent use.
type CompiledProject struct {
	name      string
	namespace string
	entries   []saEntry
	dests     []compiledDestination
	sourceNS  []sourceNamespaceMatcher

	// sourceRepos is spec.sourceRepos, compiled into sources on the first
	// SourcePermitted: the impersonation gate compiles every project of a
	// snapshot and never asks about sources, and sourceRepos patterns have
	// no length bound (gobwas/glob's compile time grows faster than
	// quadratically with the pattern).
	sourceRepos []string
	sourcesOnce sync.Once
	sources     []sourceRepoPattern
}

// ProjectMatcher is another name for CompiledProject.
type ProjectMatcher = CompiledProject

// CompileAppProject compiles p's destinationServiceAccounts (server and
// namespace globs with no separators, as Argo CD's util/glob.Match),
// destinations and sourceNamespaces (sourceRepos on first use). It returns an
// error naming every destinationServiceAccounts entry whose server or
// namespace pattern does not compile (or is longer than 256 bytes, or would
// crash gobwas/glob), since such a project cannot be evaluated the way Argo
// CD would (its walk fails on reaching that entry); callers fail closed on it. A
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
		dests: compileDestinations(p), sourceNS: compileSourceNamespaces(p.Spec.SourceNamespaces), sourceRepos: slices.Clone(p.Spec.SourceRepos)}
	for i, e := range p.Spec.DestinationServiceAccounts {
		c.entries[i] = saCompileEntry(e)
	}
	return c
}

// Name is the name of the AppProject the matcher was compiled from.
func (c *CompiledProject) Name() string { return c.name }

// Len is the number of destinationServiceAccounts entries.
func (c *CompiledProject) Len() int { return len(c.entries) }

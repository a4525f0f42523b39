package policy

import (
	"net/url"
	"regexp"
	"strings"

	"github.com/gobwas/glob"
)

// This file holds which repositories a project permits: Argo CD's
// AppProject.IsSourcePermitted (pkg/apis/application/v1alpha1
// app_project_types.go) with util/git NormalizeGitURL and util/glob's
// globMatch(pattern, val, allowNegation=true, '/').

// sshURLRegex is Argo CD's util/git sshURLRegex: user@host:path and
// ssh://user@host/path.
var sshURLRegex = regexp.MustCompile("^(ssh://)?([^/:]*?)@[^@]+$")

// normalizeGitURL is Argo CD's util/git NormalizeGitURL: lower case, trimmed,
// scp-style SSH URLs rewritten to ssh://, a trailing ".git" dropped, and the
// result re-serialised by net/url with the "ssh://" prefix removed. It
// returns "" for a URL net/url cannot parse.
func normalizeGitURL(repo string) string {
	repo = strings.ToLower(strings.TrimSpace(repo))
	if sshURLRegex.MatchString(repo) && !strings.HasPrefix(repo, "ssh://") {
		// The first colon of git@host:path is a path separator, not a port.
		repo = "ssh://" + strings.Replace(repo, ":", "/", 1)
	}
	repo = strings.TrimSuffix(repo, ".git")
	u, err := url.Parse(repo)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.String(), "ssh://")
}

// sourceRepoPattern is one spec.sourceRepos entry, normalised (as
// normalizeGitURL, after a leading "!") and compiled once.
type sourceRepoPattern struct {
	deny    bool // a leading "!": an exclusion
	any     bool // "*" (not negated): matches every repository
	pattern string
	g       glob.Glob // nil when the pattern does not compile: it matches nothing
}

func compileSourceRepo(repo string) sourceRepoPattern {
	var normalized string
	if rest, ok := strings.CutPrefix(repo, "!"); ok {
		normalized = "!" + normalizeGitURL(rest)
	} else {
		normalized = normalizeGitURL(repo)
	}
	var p sourceRepoPattern
	p.pattern, p.deny = strings.CutPrefix(normalized, "!")
	if !p.deny && p.pattern == "*" {
		p.any = true
		return p
	}
	p.g, _ = projectCompileGlob(p.pattern, '/')
	return p
}

// match is Argo CD's globMatch(pattern, repo, allowNegation=true, '/'): a
// leading "!" negates; "*" matches everything; otherwise '*' does not cross a
// '/' (use "**"). A pattern that does not compile, or that would crash
// gobwas/glob, matches nothing (upstream's glob.Match logs and returns
// false), so its negation matches everything, as upstream.
func (p *sourceRepoPattern) match(repo string) bool {
	if p.any {
		return true
	}
	matched := false
	if p.g != nil {
		ok, err := saSafeMatch(p.g, p.pattern, repo)
		matched = ok && err == nil
	}
	return matched != p.deny
}

// SourcePermitted reports whether the project permits Applications from
// repoURL: Argo CD's AppProject.IsSourcePermitted. The normalised URL (lower
// case, scp-style SSH as ssh://, no ".git" suffix) must match some
// spec.sourceRepos entry, and no "!" entry may exclude it (an exclusion wins
// wherever it stands in the list). The patterns are normalised and compiled
// on the first call, once per CompiledProject. Unlike destinations,
// sourceRepos patterns have no length bound, as upstream.
func (c *CompiledProject) SourcePermitted(repoURL string) bool {
	c.sourcesOnce.Do(func() {
		c.sources = make([]sourceRepoPattern, len(c.sourceRepos))
		for i, repo := range c.sourceRepos {
			c.sources[i] = compileSourceRepo(repo)
		}
	})
	src := normalizeGitURL(repoURL)
	anyMatched := false
	for i := range c.sources {
		p := &c.sources[i]
		if p.match(src) {
			anyMatched = true
		} else if p.deny {
			return false
		}
	}
	return anyMatched
}

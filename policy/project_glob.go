package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gobwas/glob"
	"github.com/gobwas/glob/match"
)

// This file holds the one way AppProject globs are compiled and matched
// (gobwas/glob, as Argo CD's util/glob), guarded against the library's
// crashes and slow patterns.

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

// projectCompileGlob compiles a pattern the way Argo CD's util/glob.Match does:
// gobwas/glob with the given separators. Destination and ServiceAccount
// patterns have none, so '*' also matches '/', '.' and ':'; sourceRepos
// patterns have '/', so '*' stays within a path segment ("**" crosses them).
//
// gobwas/glob v0.2.3 compiles some patterns (an unterminated or empty "{}"
// alternative such as "a{" or "a{}", or "{0*0*0,0}") into a fixed-length row
// holding a matcher of length zero or less, whose Match panics with "slice
// bounds out of range" on short inputs; Argo CD would crash on them. Such
// patterns are an error here, as is a panic inside the compiler.
func projectCompileGlob(pattern string, separators ...rune) (g glob.Glob, err error) {
	defer func() {
		if r := recover(); r != nil {
			g, err = nil, fmt.Errorf("glob compiler failed: %v", r)
		}
	}()
	g, err = glob.Compile(pattern, separators...)
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

package syncer

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/gobwas/glob"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// This file holds the project checks that need no cluster: source
// repositories (Argo CD AppProject.IsSourcePermitted with util/git
// NormalizeGitURL) and destinations (policy.CompiledProject, Argo CD
// isDestinationMatched). Kind checks need the cluster's discovery and live in
// plan.go.

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

// sourceGlobMatch is Argo CD's globMatch(pattern, val, allowNegation=true,
// '/'): a leading "!" negates; "*" matches everything; otherwise gobwas/glob
// with '/' as separator, so "*" does not cross a path segment (use "**").
// A pattern that does not compile matches nothing (upstream logs and returns
// false).
func sourceGlobMatch(pattern, val string) bool {
	if strings.HasPrefix(pattern, "!") {
		return !globMatchSeparated(pattern[1:], val)
	}
	if pattern == "*" {
		return true
	}
	return globMatchSeparated(pattern, val)
}

func globMatchSeparated(pattern, val string) (matched bool) {
	defer func() {
		// gobwas/glob panics on a few malformed patterns; treat as no match.
		if recover() != nil {
			matched = false
		}
	}()
	g, err := glob.Compile(pattern, '/')
	if err != nil {
		return false
	}
	return g.Match(val)
}

// sourcePermitted is Argo CD's AppProject.IsSourcePermitted: the normalised
// repository URL must match some sourceRepos entry, and no "!" entry may
// exclude it (an exclusion wins wherever it stands in the list).
func sourcePermitted(p *v1alpha1.AppProject, repoURL string) bool {
	src := normalizeGitURL(repoURL)
	anyMatched := false
	for _, repo := range p.Spec.SourceRepos {
		var normalized string
		if strings.HasPrefix(repo, "!") {
			normalized = "!" + normalizeGitURL(strings.TrimPrefix(repo, "!"))
		} else {
			normalized = normalizeGitURL(repo)
		}
		if sourceGlobMatch(normalized, src) {
			anyMatched = true
		} else if strings.HasPrefix(normalized, "!") {
			return false
		}
	}
	return anyMatched
}

// checkSource reports an Application whose repository the project does not
// permit, with Argo CD's message.
func checkSource(p *v1alpha1.AppProject, src v1alpha1.ApplicationSource) error {
	if sourcePermitted(p, src.RepoURL) {
		return nil
	}
	return fmt.Errorf("application repo %s is not permitted in project '%s': add it (or a glob matching it) to the AppProject's spec.sourceRepos", src.RepoURL, p.Name)
}

// checkDestination reports a destination the project does not permit, with
// Argo CD's message. server is the resolved server URL; name the cluster name
// when the Application gave one.
func checkDestination(c *policy.CompiledProject, projectName, server, name, namespace string) error {
	if c.DestinationPermitted(server, name, namespace) {
		return nil
	}
	return fmt.Errorf("application destination server '%s' and namespace '%s' do not match any of the allowed destinations in project '%s': add the destination to the AppProject's spec.destinations", server, namespace, projectName)
}

// syncOptions are the Application-level syncOptions deputy understands.
type syncOptions struct {
	createNamespace bool
	pruneDisabled   bool
}

func parseSyncOptions(p *v1alpha1.SyncPolicy) syncOptions {
	var o syncOptions
	if p == nil {
		return o
	}
	for _, opt := range p.SyncOptions {
		k, v, _ := strings.Cut(strings.TrimSpace(opt), "=")
		switch {
		case k == "CreateNamespace" && strings.EqualFold(v, "true"):
			o.createNamespace = true
		case k == "Prune" && strings.EqualFold(v, "false"):
			o.pruneDisabled = true
		}
	}
	return o
}

// helmError is returned for an Argo CD Helm source.
func helmError(src v1alpha1.ApplicationSource) error {
	if src.Chart == "" && src.Helm == nil {
		return nil
	}
	return errHelm
}

// errHelm starts with the product's name, capitalised as users read it.
var errHelm = errors.New("Helm sources are not supported by deputy; render the chart to plain manifests or a kustomization")

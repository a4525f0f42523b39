package source

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// This file decides which remote URLs deputy fetches, where their mirror
// lives in the cache, and which configured credential (if any) is sent to
// them. An Application's repoURL is written by a tenant: everything here
// treats it as hostile.

// checkRemoteURL accepts an http(s) repository URL that has exactly one
// reading: a host, no user info, no query or fragment, and a path without
// dot segments, backslashes or percent-encoded separators (a server may
// resolve "/team-a/../team-b" or "/team-a%2F..%2Fteam-b" to another
// repository than the one the credential matching saw). Errors name
// spec.source.repoURL and the fix.
func checkRemoteURL(u *url.URL, raw string) error {
	switch {
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("spec.source.repoURL %q has no host: use https://HOST/PATH", raw)
	case u.User != nil:
		return fmt.Errorf("spec.source.repoURL %q carries credentials: remove them from the URL and configure a repository credential (sync.repositories) instead", redactURL(u))
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("spec.source.repoURL %q has a query or fragment: a Git repository URL has neither", raw)
	}
	if _, err := portOf(u); err != nil {
		return fmt.Errorf("spec.source.repoURL %q: %w", raw, err)
	}
	escaped := strings.ToLower(u.EscapedPath())
	if strings.Contains(escaped, "%2f") || strings.Contains(escaped, "%5c") || strings.Contains(u.Path, "\\") {
		return fmt.Errorf("spec.source.repoURL %q has an encoded slash or a backslash in its path: write the path with plain '/'", raw)
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("spec.source.repoURL %q has a %q path segment: write the repository's path without . or .. segments", raw, seg)
		}
	}
	return nil
}

// portOf returns u's port as a number, the scheme's default when absent.
func portOf(u *url.URL) (int, error) {
	p := u.Port()
	if p == "" {
		switch u.Scheme {
		case "https", "oci":
			return 443, nil
		case "http":
			return 80, nil
		}
		return 0, fmt.Errorf("scheme %q has no default port", u.Scheme)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q is not a port number", p)
	}
	return n, nil
}

// mirrorKey is the name of the cache directory of the mirror of repoURL: a
// hash of the exact URL string, with no normalisation at all. Two spellings
// of what may be one repository (case, ".git", a trailing slash) get two
// mirrors: a cheap duplicate, where folding them let one tenant's spelling
// decide what another tenant's Application deploys.
func mirrorKey(repoURL string) string {
	sum := sha256.Sum256([]byte(repoURL))
	return hex.EncodeToString(sum[:])
}

// credentialScope is what a credential URL (or a repository URL) is matched
// on: scheme, host and port exactly, then the decoded path on '/'
// boundaries.
type credentialScope struct {
	scheme string
	// host is lower case (host names are case-insensitive); IPv6 without
	// brackets.
	host string
	port int
	// path is the decoded path without trailing slashes ("" for the root).
	path string
}

// errBadCredentialURL is wrapped by parseCredentialScope's errors.
var errBadCredentialURL = errors.New("not a usable repository URL")

// parseCredentialScope parses an http(s) URL into the scope credentials are
// matched on. It refuses what checkRemoteURL refuses, so that both sides of
// a match have one reading.
func parseCredentialScope(raw string) (credentialScope, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return credentialScope{}, fmt.Errorf("%w: %w", errBadCredentialURL, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "oci" {
		return credentialScope{}, fmt.Errorf("%w: scheme %q is not http, https or oci", errBadCredentialURL, u.Scheme)
	}
	if err := checkRemoteURL(u, raw); err != nil {
		return credentialScope{}, fmt.Errorf("%w: %w", errBadCredentialURL, err)
	}
	port, _ := portOf(u)
	return credentialScope{
		scheme: u.Scheme,
		host:   strings.ToLower(u.Hostname()),
		port:   port,
		path:   strings.TrimRight(u.Path, "/"),
	}, nil
}

// covers reports whether the credential scope c applies to the repository
// scope r: same scheme, host and port, and r's path is c's path or below it
// on a '/' boundary ("/team-a" covers "/team-a" and "/team-a/x.git", never
// "/team-a-evil"). Paths compare case-sensitively, as URL paths do.
func (c credentialScope) covers(r credentialScope) bool {
	if c.scheme != r.scheme || c.host != r.host || c.port != r.port {
		return false
	}
	return c.path == "" || r.path == c.path || strings.HasPrefix(r.path, c.path+"/")
}

// matchCredential returns the index of the credential of creds that applies
// to repoURL (the longest matching path wins; among equal paths the first),
// or -1. Credentials whose URL does not parse match nothing (New and
// the configuration's validation refuse them).
func matchCredential(creds []RepoCredential, repoURL string) int {
	repo, err := parseCredentialScope(repoURL)
	if err != nil {
		return -1
	}
	best, bestLen := -1, -1
	for i, cr := range creds {
		scope, err := parseCredentialScope(cr.URL)
		if err != nil || !scope.covers(repo) {
			continue
		}
		if len(scope.path) > bestLen {
			best, bestLen = i, len(scope.path)
		}
	}
	return best
}

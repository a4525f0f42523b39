package gitpush

import (
	"encoding/hex"
	"net/url"
	"path"
	"slices"
	"strings"

	"deputy.dev/deputy/policy/v1alpha1"
)

// RefType says what a push updated.
type RefType string

const (
	// RefBranch is a push to refs/heads/<name>.
	RefBranch RefType = "branch"
	// RefTag is a push to refs/tags/<name>.
	RefTag RefType = "tag"
	// RefUnknown is a plain-form revision given as a bare name: a branch or
	// a tag, the sender did not say.
	RefUnknown RefType = ""
)

// Push is one push to a Git repository, as a Git server (or deputy's plain
// form) reported it: what apps.SyncPush matches Applications against. The Git
// push webhook parses the providers' payloads into it.
type Push struct {
	// Provider names the sender: github, gitlab or form (the webhook's
	// Provider constants).
	Provider string `json:"provider"`
	// DeliveryID is the sender's ID of the delivery (X-GitHub-Delivery,
	// X-Gitlab-Event-UUID), if it sent one.
	DeliveryID string `json:"deliveryID,omitempty"`
	// Repository is how the sender names the repository (its web URL), for
	// messages.
	Repository string `json:"repository"`
	// RepoURLs are all the URLs of the repository in the payload (web, HTTPS,
	// SSH, git://); an Application matches when its repoURL is the same
	// repository as any of them (RepositoryKey).
	RepoURLs []string `json:"repoURLs"`
	// Ref is the pushed ref as sent: refs/heads/main, refs/tags/v1.2.0, or
	// the plain form's revision.
	Ref string `json:"ref"`
	// Revision is the branch or tag name: main, v1.2.0.
	Revision string `json:"revision"`
	// RefType is RefBranch, RefTag or RefUnknown.
	RefType RefType `json:"refType,omitempty"`
	// DefaultBranch is the repository's default branch, when known.
	DefaultBranch string `json:"defaultBranch,omitempty"`
	// TouchedHead is true for a push to the default branch: Applications
	// whose targetRevision is "" or HEAD are affected.
	TouchedHead bool `json:"touchedHead,omitempty"`
	// Commit is the commit the ref points to after the push, when known.
	Commit string `json:"commit,omitempty"`
	// Deleted is true when the push deleted the ref; it triggers nothing.
	Deleted bool `json:"deleted,omitempty"`
}

// Initiator is the InitiatedBy.Username of a sync a push triggered, e.g.
// "git-webhook:github".
func (p Push) Initiator() string { return "git-webhook:" + p.Provider }

// Matches says whether the push affects app: app's spec.source.repoURL is the
// same repository as one of the push's RepoURLs (RepositoryKey), and its
// targetRevision is one the push moved (RevisionMatches).
func (p Push) Matches(app *v1alpha1.Application) bool {
	return p.matches(app, repoKeys(p.RepoURLs))
}

// matches says whether push affects app: one of its sources (spec.source,
// or any of spec.sources, ref sources included: their files are part of the
// render) has the push's repository (keys are the push's repoKeys) and a
// targetRevision the push moved.
func (push Push) matches(app *v1alpha1.Application, keys []string) bool {
	for _, src := range app.Spec.GetSources() {
		k := RepositoryKey(src.RepoURL)
		if k != "" && slices.Contains(keys, k) && RevisionMatches(src.TargetRevision, push) {
			return true
		}
	}
	return false
}

// RevisionMatches says whether push moved targetRevision: Argo CD's
// sourceRevisionHasChanged, stricter about the ref type when targetRevision
// spells it out (refs/heads/x matches only a branch push, refs/tags/x only a
// tag push), and never true for a commit SHA. "" and HEAD match a push to
// the default branch.
func RevisionMatches(targetRevision string, push Push) bool {
	switch {
	case targetRevision == "" || targetRevision == "HEAD":
		return push.TouchedHead
	case IsCommitSHA(targetRevision):
		return false
	}
	if name, ok := strings.CutPrefix(targetRevision, "refs/heads/"); ok {
		return push.RefType != RefTag && name == push.Revision
	}
	if name, ok := strings.CutPrefix(targetRevision, "refs/tags/"); ok {
		return push.RefType != RefBranch && name == push.Revision
	}
	return targetRevision == push.Revision
}

// IsCommitSHA reports whether s is a full SHA-1 or SHA-256 object name (40
// or 64 hex digits).
func IsCommitSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func repoKeys(urls []string) []string {
	var keys []string
	for _, u := range urls {
		if k := RepositoryKey(u); k != "" && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// RepositoryKey is the identity of a repository URL for push matching, or ""
// when the URL names none. It follows what Argo CD's webhook accepts as the
// same repository (util/webhook GetWebURLRegex, with util/git
// NormalizeGitURL's lower-casing): the scheme (https, http, ssh, git),
// credentials and port are ignored; scp-like user@host:path is
// ssh://user@host/path; an ssh. or altssh. host prefix is dropped (GitHub's
// ssh.github.com); host and path compare case-insensitively; a trailing "/"
// and ".git" are dropped. So https://github.com/Org/Repo,
// git@github.com:org/repo.git and ssh://git@github.com:22/org/repo/ are one
// repository.
//
// file:// URLs and local paths keep their case and compare by cleaned path.
func RepositoryKey(raw string) string {
	s := strings.TrimSpace(raw)
	if s == "" {
		return ""
	}
	var host, p string
	switch {
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		if err != nil {
			return ""
		}
		if strings.EqualFold(u.Scheme, "file") {
			if u.Host != "" && !strings.EqualFold(u.Host, "localhost") {
				return ""
			}
			return localRepoKey(u.Path)
		}
		host, p = u.Hostname(), u.Path
	case isSCPLike(s):
		hp, rest, _ := strings.Cut(s, ":")
		if at := strings.LastIndexByte(hp, '@'); at >= 0 {
			hp = hp[at+1:]
		}
		host, p = hp, rest
	default:
		return localRepoKey(s)
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, prefix := range []string{"ssh.", "altssh."} {
		if rest, ok := strings.CutPrefix(host, prefix); ok && strings.Contains(rest, ".") {
			host = rest
			break
		}
	}
	p = trimRepoPath(strings.ToLower(p))
	if host == "" || p == "" {
		return ""
	}
	return host + "/" + p
}

// isSCPLike is Git's rule for user@host:path: no "://", and a colon before the
// first slash (a DOS drive letter, C:, is a path).
func isSCPLike(s string) bool {
	colon := strings.IndexByte(s, ':')
	if colon <= 0 || colon == 1 && isASCIILetter(s[0]) {
		return false
	}
	slash := strings.IndexByte(s, '/')
	return slash < 0 || colon < slash
}

func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// localRepoKey is the key of a local path: an absolute path is
// "file:///path", a relative one "file:path" (never equal to an absolute one).
func localRepoKey(p string) string {
	abs := strings.HasPrefix(p, "/")
	if p = trimRepoPath(p); p == "" {
		return ""
	}
	if abs {
		return "file:///" + p
	}
	return "file:" + p
}

// trimRepoPath cleans p and drops leading and trailing slashes and a ".git"
// suffix.
func trimRepoPath(p string) string {
	p = strings.Trim(path.Clean("/"+p), "/")
	p = strings.TrimSuffix(p, ".git")
	return strings.TrimRight(p, "/")
}

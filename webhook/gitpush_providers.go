package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"

	kjson "sigs.k8s.io/json"

	"deputy.dev/deputy/apps/gitpush"
)

// Request headers read by the Git push webhook.
const (
	headerGitHubEvent     = "X-GitHub-Event"
	headerGitHubSignature = "X-Hub-Signature-256"
	headerGitHubDelivery  = "X-GitHub-Delivery"
	headerGitLabEvent     = "X-Gitlab-Event"
	headerGitLabToken     = "X-Gitlab-Token"
	headerGitLabDelivery  = "X-Gitlab-Event-UUID"
	headerDeputyToken     = "X-Deputy-Webhook-Token"
)

func (h *GitWebhookHandler) serveGitHub(w http.ResponseWriter, r *http.Request, d delivery) {
	secret, ok := h.secret(h.github)
	if !ok {
		h.unauthorized(w, r, d, "the GitHub secret is not configured or cannot be read (sync.webhook.githubSecretFile)")
		return
	}
	// The signature needs the body; its header is checked before the body
	// is read.
	want, ok := parseGitHubSignature(r.Header.Get(headerGitHubSignature))
	if !ok {
		h.unauthorized(w, r, d, "X-Hub-Signature-256 is missing or is not sha256=<64 hex digits>")
		return
	}
	form := false
	switch mediaType(r) {
	case "application/json":
	case "application/x-www-form-urlencoded":
		form = true
	default:
		h.reject(w, r, d, unsupportedMedia(r, "GitHub webhooks send application/json or application/x-www-form-urlencoded"))
		return
	}
	body, serr := readLimitedBody(w, r, h.limit)
	if serr != nil {
		h.reject(w, r, d, serr)
		return
	}
	mac := hmac.New(sha256.New, secret)
	_, _ = mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), want) {
		h.unauthorized(w, r, d, "X-Hub-Signature-256 does not match the body: the secret differs or the body was changed")
		return
	}
	switch d.event {
	case "push":
	case "ping":
		h.ignore(w, r, d, gitpush.Push{Provider: ProviderGitHub}, "ping received: deputy accepts this webhook's push events")
		return
	default:
		h.ignore(w, r, d, gitpush.Push{Provider: ProviderGitHub}, fmt.Sprintf("GitHub event %q ignored: deputy acts on push events", d.event))
		return
	}
	payload := body
	if form {
		var err error
		if payload, err = githubFormPayload(body); err != nil {
			h.reject(w, r, d, badRequest("%v", err))
			return
		}
	}
	push, err := parseGitHubPush(payload)
	if err != nil {
		h.reject(w, r, d, badRequest("%v", err))
		return
	}
	push.DeliveryID = d.id
	h.dispatch(w, r, d, push)
}

// sharedToken authenticates a delivery that carries the provider's secret
// itself in header (GitLab, the plain form): false, with the 401 written,
// when the secret (what, configured at field) is not configured or the
// header does not equal it (compared in constant time).
func (h *GitWebhookHandler) sharedToken(w http.ResponseWriter, r *http.Request, d delivery, f *secretFile, header, what, field string) bool {
	secret, ok := h.secret(f)
	if !ok {
		h.unauthorized(w, r, d, what+" is not configured or cannot be read ("+field+")")
		return false
	}
	if !tokenEqual(secret, r.Header.Get(header)) {
		h.unauthorized(w, r, d, header+" is missing or wrong")
		return false
	}
	return true
}

func (h *GitWebhookHandler) serveGitLab(w http.ResponseWriter, r *http.Request, d delivery) {
	if !h.sharedToken(w, r, d, h.gitlab, headerGitLabToken, "the GitLab secret token", "sync.webhook.gitlabSecretFile") {
		return
	}
	switch d.event {
	case "Push Hook", "Tag Push Hook":
	default:
		// Authenticated, and not read further.
		h.ignore(w, r, d, gitpush.Push{Provider: ProviderGitLab}, fmt.Sprintf("GitLab event %q ignored: deputy acts on Push Hook and Tag Push Hook", d.event))
		return
	}
	if mediaType(r) != "application/json" {
		h.reject(w, r, d, unsupportedMedia(r, "GitLab webhooks send application/json"))
		return
	}
	body, serr := readLimitedBody(w, r, h.limit)
	if serr != nil {
		h.reject(w, r, d, serr)
		return
	}
	push, err := parseGitLabPush(body)
	if err != nil {
		h.reject(w, r, d, badRequest("%v", err))
		return
	}
	push.DeliveryID = d.id
	h.dispatch(w, r, d, push)
}

func (h *GitWebhookHandler) serveForm(w http.ResponseWriter, r *http.Request, d delivery) {
	if !h.sharedToken(w, r, d, h.form, headerDeputyToken, "the webhook token", "sync.webhook.tokenFile") {
		return
	}
	if mediaType(r) != "application/x-www-form-urlencoded" {
		h.reject(w, r, d, unsupportedMedia(r, "send application/x-www-form-urlencoded with repoURL and revision "+
			"(GitHub and GitLab are recognised by their X-GitHub-Event and X-Gitlab-Event headers)"))
		return
	}
	body, serr := readLimitedBody(w, r, h.limit)
	if serr != nil {
		h.reject(w, r, d, serr)
		return
	}
	push, err := parseGitWebhookForm(body)
	if err != nil {
		h.reject(w, r, d, badRequest("%v", err))
		return
	}
	h.dispatch(w, r, d, push)
}

// parseGitHubSignature reads X-Hub-Signature-256: "sha256=" and the hex
// HMAC-SHA256 of the body.
func parseGitHubSignature(v string) ([]byte, bool) {
	h, ok := strings.CutPrefix(v, "sha256=")
	if !ok || len(h) != 2*sha256.Size {
		return nil, false
	}
	b, err := hex.DecodeString(h)
	return b, err == nil
}

// tokenEqual compares a shared token in constant time. Both sides are hashed
// first so that the time does not depend on the length of either (a plain
// subtle.ConstantTimeCompare returns early on a length mismatch).
func tokenEqual(secret []byte, got string) bool {
	if got == "" {
		return false
	}
	a, b := sha256.Sum256(secret), sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// githubPush is the part of GitHub's push event deputy reads
// (https://docs.github.com/en/webhooks/webhook-events-and-payloads#push).
type githubPush struct {
	Ref        string `json:"ref"`
	After      string `json:"after"`
	Deleted    bool   `json:"deleted"`
	Repository struct {
		HTMLURL       string `json:"html_url"`
		CloneURL      string `json:"clone_url"`
		GitURL        string `json:"git_url"`
		SSHURL        string `json:"ssh_url"`
		URL           string `json:"url"`
		DefaultBranch string `json:"default_branch"`
	} `json:"repository"`
}

// githubFormPayload extracts the JSON of an application/x-www-form-urlencoded
// delivery (payload=...).
func githubFormPayload(body []byte) ([]byte, error) {
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("the form-encoded GitHub delivery cannot be parsed: %v", err)
	}
	p := q["payload"]
	if len(p) != 1 || p[0] == "" {
		return nil, errors.New("the form-encoded GitHub delivery needs exactly one non-empty payload field")
	}
	return []byte(p[0]), nil
}

// parseGitHubPush reads a GitHub push event.
func parseGitHubPush(body []byte) (gitpush.Push, error) {
	var p githubPush
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &p); err != nil {
		return gitpush.Push{}, fmt.Errorf("the GitHub push event is not a JSON object of the documented format: %v", err)
	}
	repo := p.Repository
	return newPushEvent(ProviderGitHub, p.Ref, p.After, p.Deleted, repo.DefaultBranch,
		repo.HTMLURL, repo.CloneURL, repo.SSHURL, repo.GitURL, repo.URL)
}

// gitlabPush is the part of GitLab's Push Hook and Tag Push Hook deputy reads
// (https://docs.gitlab.com/user/project/integrations/webhook_events/#push-events).
type gitlabPush struct {
	Ref         string `json:"ref"`
	After       string `json:"after"`
	CheckoutSHA string `json:"checkout_sha"`
	Project     struct {
		WebURL        string `json:"web_url"`
		GitHTTPURL    string `json:"git_http_url"`
		GitSSHURL     string `json:"git_ssh_url"`
		DefaultBranch string `json:"default_branch"`
	} `json:"project"`
	Repository struct {
		Homepage   string `json:"homepage"`
		GitHTTPURL string `json:"git_http_url"`
		GitSSHURL  string `json:"git_ssh_url"`
	} `json:"repository"`
}

// parseGitLabPush reads a GitLab push or tag push event. A deleted branch or
// tag has after = 0000… (and no checkout_sha).
func parseGitLabPush(body []byte) (gitpush.Push, error) {
	var p gitlabPush
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &p); err != nil {
		return gitpush.Push{}, fmt.Errorf("the GitLab push event is not a JSON object of the documented format: %v", err)
	}
	after := p.After
	if p.CheckoutSHA != "" && !isZeroSHA(after) {
		after = p.CheckoutSHA
	}
	return newPushEvent(ProviderGitLab, p.Ref, after, false, p.Project.DefaultBranch,
		p.Project.WebURL, p.Project.GitHTTPURL, p.Project.GitSSHURL,
		p.Repository.Homepage, p.Repository.GitHTTPURL, p.Repository.GitSSHURL)
}

func newPushEvent(provider, ref, after string, deleted bool, defaultBranch string, urls ...string) (gitpush.Push, error) {
	if ref == "" {
		return gitpush.Push{}, fmt.Errorf("the %s push event has no ref", providerTitle(provider))
	}
	ev := gitpush.Push{Provider: provider, Ref: ref, DefaultBranch: defaultBranch, Deleted: deleted || isZeroSHA(after)}
	if !ev.Deleted {
		ev.Commit = after
	}
	for _, u := range urls {
		if u != "" && !slices.Contains(ev.RepoURLs, u) {
			ev.RepoURLs = append(ev.RepoURLs, u)
		}
	}
	if !slices.ContainsFunc(ev.RepoURLs, namesRepository) {
		return gitpush.Push{}, fmt.Errorf("the %s push event names no repository URL deputy can read", providerTitle(provider))
	}
	ev.Repository = ev.RepoURLs[0]
	if name, ok := strings.CutPrefix(ref, "refs/heads/"); ok && name != "" {
		ev.RefType, ev.Revision = gitpush.RefBranch, name
		ev.TouchedHead = defaultBranch != "" && name == defaultBranch
	} else if name, ok := strings.CutPrefix(ref, "refs/tags/"); ok && name != "" {
		ev.RefType, ev.Revision = gitpush.RefTag, name
	}
	// Any other ref (refs/pull/…, refs/merge-requests/…, notes) leaves
	// Revision empty: the delivery is ignored.
	return ev, nil
}

func providerTitle(p string) string {
	switch p {
	case ProviderGitHub:
		return "GitHub"
	case ProviderGitLab:
		return "GitLab"
	}
	return p
}

// parseGitWebhookForm reads the plain form: repoURL, revision and optional
// defaultBranch, each at most once.
func parseGitWebhookForm(body []byte) (gitpush.Push, error) {
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return gitpush.Push{}, fmt.Errorf("the form cannot be parsed as application/x-www-form-urlencoded: %v", err)
	}
	field := func(name string) (string, error) {
		switch v := q[name]; len(v) {
		case 0:
			return "", nil
		case 1:
			return v[0], nil
		}
		return "", fmt.Errorf("form field %s is given %d times: give it once", name, len(q[name]))
	}
	repo, err := field("repoURL")
	if err != nil {
		return gitpush.Push{}, err
	}
	rev, err := field("revision")
	if err != nil {
		return gitpush.Push{}, err
	}
	def, err := field("defaultBranch")
	if err != nil {
		return gitpush.Push{}, err
	}
	switch {
	case repo == "":
		return gitpush.Push{}, errors.New("form field repoURL is required: the repository's URL, as Applications name it in spec.source.repoURL")
	case !namesRepository(repo):
		return gitpush.Push{}, fmt.Errorf("repoURL %q names no repository: give https://host/path, ssh://user@host/path, user@host:path or file:///path", repo)
	case rev == "":
		return gitpush.Push{}, errors.New("form field revision is required: the pushed branch or tag (main, refs/heads/main, refs/tags/v1.2.0) or HEAD")
	}
	for _, f := range []struct{ name, v string }{{"revision", rev}, {"defaultBranch", def}} {
		if len(f.v) > maxRevisionLength {
			return gitpush.Push{}, fmt.Errorf("%s is longer than %d characters", f.name, maxRevisionLength)
		}
		if strings.IndexFunc(f.v, func(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }) >= 0 {
			return gitpush.Push{}, fmt.Errorf("%s %q contains blanks or control characters: give a branch or tag name", f.name, f.v)
		}
	}
	if gitpush.IsCommitSHA(rev) {
		return gitpush.Push{}, fmt.Errorf("revision %q is a commit SHA: give the branch or tag that was pushed", rev)
	}
	ev := gitpush.Push{Provider: ProviderForm, Repository: repo, RepoURLs: []string{repo}, Ref: rev, DefaultBranch: def}
	switch {
	case rev == "HEAD":
		// The default branch moved; its name is known only if given.
		ev.RefType, ev.Revision, ev.TouchedHead = gitpush.RefBranch, def, true
	case strings.HasPrefix(rev, "refs/heads/"):
		ev.RefType, ev.Revision = gitpush.RefBranch, strings.TrimPrefix(rev, "refs/heads/")
	case strings.HasPrefix(rev, "refs/tags/"):
		ev.RefType, ev.Revision = gitpush.RefTag, strings.TrimPrefix(rev, "refs/tags/")
	case strings.HasPrefix(rev, "refs/"):
		return gitpush.Push{}, fmt.Errorf("revision %q is neither a branch (refs/heads/…) nor a tag (refs/tags/…)", rev)
	default:
		ev.RefType, ev.Revision = gitpush.RefUnknown, rev
	}
	if ev.Revision == "" && !ev.TouchedHead {
		return gitpush.Push{}, fmt.Errorf("revision %q names no branch or tag", rev)
	}
	if def != "" && ev.RefType != gitpush.RefTag && ev.Revision == def {
		ev.TouchedHead = true
	}
	return ev, nil
}

// namesRepository reports whether u names a repository push matching can
// compare (gitpush.RepositoryKey).
func namesRepository(u string) bool { return gitpush.RepositoryKey(u) != "" }

// isZeroSHA: the null object name Git servers send for a deleted ref.
func isZeroSHA(s string) bool {
	return s != "" && strings.Trim(s, "0") == ""
}

package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// GitWebhookPath is where Git servers announce pushes (Argo CD's path).
const GitWebhookPath = "/api/webhook"

// Providers, as PushEvent.Provider and the answer name them.
const (
	ProviderGitHub = "github"
	ProviderGitLab = "gitlab"
	// ProviderForm is the plain form any other sender (a CI job, a script)
	// posts: repoURL and revision, with the token in X-Deputy-Webhook-Token.
	ProviderForm = "form"
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

// gitWebhookUnauthorized is the one answer to every request that is not
// authenticated: a provider without a configured secret, a missing or
// malformed signature or token, a wrong one. It says nothing about which part
// failed (deputy's log does, for the operator).
const gitWebhookUnauthorized = "Unauthorized: deputy could not authenticate this webhook delivery; " +
	"check that the Git server and deputy's sync.webhook settings share the same secret"

// gitWebhookTriggerTimeout bounds the triggering of all matched Applications
// of one delivery; it is below the server's WriteTimeout (30s) so that the
// sender still gets the answer.
const gitWebhookTriggerTimeout = 20 * time.Second

// maxSecretFileBytes bounds a secret file: secrets are short, and a path that
// points at a large file by mistake must not be read into memory per request.
const maxSecretFileBytes = 64 << 10

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

// PushEvent is one push, as a Git server (or the plain form) reported it.
type PushEvent struct {
	// Provider is ProviderGitHub, ProviderGitLab or ProviderForm.
	Provider string `json:"provider"`
	// DeliveryID is the sender's ID of the delivery (X-GitHub-Delivery,
	// X-Gitlab-Event-UUID), if it sent one.
	DeliveryID string `json:"deliveryID,omitempty"`
	// Repository is how the sender names the repository (its web URL), for
	// messages.
	Repository string `json:"repository"`
	// RepoURLs are all the URLs of the repository in the payload (web, HTTPS,
	// SSH, git://); an Application matches when its repoURL is the same
	// repository as any of them.
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

// GitWebhookOptions configure the GitWebhookHandler. Applications and Trigger
// are required.
type GitWebhookOptions struct {
	// Settings name the secret files and the body limit
	// (config sync.webhook). A provider whose secret file is not set rejects
	// every delivery with 401.
	Settings config.GitWebhook
	// Applications returns every Application deputy knows. The handler reads
	// them and never modifies them. policy.ErrNotLoaded is answered 503.
	Applications func() ([]*v1alpha1.Application, error)
	// Trigger starts or records a sync of app for push. app is shared: read
	// it, do not modify it. It returns syncer.ErrOperationInProgress while an
	// operation of app is pending or runs (reported as already in progress,
	// not as an error). ctx is not cancelled when the sender disconnects.
	Trigger func(ctx context.Context, app *v1alpha1.Application, push PushEvent) error
	// Log receives one line per delivery. Default: discard.
	Log *slog.Logger
	// Metrics, if set, counts deliveries and triggered Applications.
	Metrics *Metrics
}

// GitWebhookResult is the answer to a delivery that was authenticated and
// understood (200). The lists hold "namespace/name" of the Applications whose
// spec.source matches the push: Triggered were started (or recorded for the
// leader), AlreadyInProgress had an operation pending, Manual have no
// spec.syncPolicy.automated and were left alone.
type GitWebhookResult struct {
	Provider          string   `json:"provider"`
	Event             string   `json:"event,omitempty"`
	Repository        string   `json:"repository,omitempty"`
	Revision          string   `json:"revision,omitempty"`
	Triggered         []string `json:"triggered"`
	AlreadyInProgress []string `json:"alreadyInProgress"`
	Manual            []string `json:"manual"`
	Message           string   `json:"message,omitempty"`
}

// GitWebhookHandler serves POST /api/webhook: Git servers announce pushes, and
// the automated Applications that track the pushed branch or tag of that
// repository are synced.
//
// Senders, told apart by their headers:
//   - GitHub (X-GitHub-Event): push events, signed with
//     X-Hub-Signature-256 (HMAC-SHA256 of the raw body); JSON or
//     application/x-www-form-urlencoded (payload=...) bodies. ping is
//     answered 200, other events are ignored with 200.
//   - GitLab (X-Gitlab-Event): Push Hook and Tag Push Hook, with the secret
//     token in X-Gitlab-Token. Other events are ignored with 200.
//   - anyone else: the plain form, application/x-www-form-urlencoded with
//     repoURL, revision (branch or tag, with or without refs/heads/ or
//     refs/tags/, or HEAD) and optionally defaultBranch, with the token in
//     X-Deputy-Webhook-Token.
//
// Each provider is accepted only when its secret is configured. This differs
// from Argo CD, whose webhook accepts unsigned payloads when no secret is set:
// deputy fails closed, and an unconfigured provider gets 401 like a wrong
// signature. Every 401 carries the same message, whatever failed.
//
// Secret files are read when the handler is created and re-read when they
// change: each request stats the file (one syscall) and reads it again only
// when its identity (device and inode), size or modification time changed.
// That follows a Kubernetes Secret volume, which swaps a symlink to a new
// file on update, without a watcher goroutine. A file that can no longer be
// read, or is empty, disables its provider (fail closed) until it is fixed.
//
// Matching follows Argo CD (util/webhook): an Application matches when its
// spec.source.repoURL is the same repository as one of the payload's URLs
// (see repoKey) and its targetRevision is the pushed branch or tag
// (with or without refs/heads/ or refs/tags/), or "" / HEAD for a push to the
// default branch. deputy is stricter on two points: refs/heads/x matches only
// a branch push and refs/tags/x only a tag push (Argo CD documents that it
// does not tell them apart), and a commit SHA never matches a push. Only
// Applications with spec.syncPolicy.automated are triggered; the others are
// listed as manual.
//
// Errors are metav1.Status objects: 405 for a method other than POST, 401 as
// above, 415 for a content type the sender does not use, 413 above
// Settings.MaxPayloadBytes, 400 for a payload that is not a push event, 503
// before the policy is loaded, 500/503 when a trigger failed (redeliver: a
// second delivery is harmless).
type GitWebhookHandler struct {
	opts                 GitWebhookOptions
	log                  *slog.Logger
	limit                int64
	github, gitlab, form *secretFile
}

// NewGitWebhookHandler returns the handler; mount it at GitWebhookPath.
//
// Errors: Applications or Trigger is nil, or a configured secret file cannot
// be read or is empty.
func NewGitWebhookHandler(opts GitWebhookOptions) (*GitWebhookHandler, error) {
	if opts.Applications == nil || opts.Trigger == nil {
		return nil, errors.New("failed to create the Git push webhook: Applications and Trigger are required")
	}
	h := &GitWebhookHandler{opts: opts, log: opts.Log, limit: opts.Settings.MaxPayloadBytes}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.limit <= 0 {
		h.limit = config.DefaultWebhookMaxPayload
	}
	for _, f := range []struct {
		into  **secretFile
		path  string
		field string
	}{
		{&h.github, opts.Settings.GitHubSecretFile, "sync.webhook.githubSecretFile"},
		{&h.gitlab, opts.Settings.GitLabSecretFile, "sync.webhook.gitlabSecretFile"},
		{&h.form, opts.Settings.TokenFile, "sync.webhook.tokenFile"},
	} {
		if f.path == "" {
			continue
		}
		s := &secretFile{path: f.path, log: h.log}
		if _, err := s.get(); err != nil {
			return nil, fmt.Errorf("failed to read %s: %w", f.field, err)
		}
		*f.into = s
	}
	return h, nil
}

// delivery is what is known about the request being served, for the log.
type delivery struct {
	provider string
	event    string
	id       string
}

// ServeHTTP implements http.Handler.
func (h *GitWebhookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reject(w, r, delivery{}, &statusError{code: http.StatusMethodNotAllowed, reason: metav1.StatusReasonMethodNotAllowed,
			message: fmt.Sprintf("method %s is not allowed: Git servers POST push events to %s", r.Method, GitWebhookPath)})
		return
	}
	switch {
	case r.Header.Get(headerGitHubEvent) != "":
		h.serveGitHub(w, r, delivery{provider: ProviderGitHub, event: r.Header.Get(headerGitHubEvent), id: r.Header.Get(headerGitHubDelivery)})
	case r.Header.Get(headerGitLabEvent) != "":
		h.serveGitLab(w, r, delivery{provider: ProviderGitLab, event: r.Header.Get(headerGitLabEvent), id: r.Header.Get(headerGitLabDelivery)})
	default:
		h.serveForm(w, r, delivery{provider: ProviderForm, event: "push"})
	}
}

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
		h.ignore(w, r, d, PushEvent{Provider: ProviderGitHub}, "ping received: deputy accepts this webhook's push events")
		return
	default:
		h.ignore(w, r, d, PushEvent{Provider: ProviderGitHub}, fmt.Sprintf("GitHub event %q ignored: deputy acts on push events", d.event))
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
		h.ignore(w, r, d, PushEvent{Provider: ProviderGitLab}, fmt.Sprintf("GitLab event %q ignored: deputy acts on Push Hook and Tag Push Hook", d.event))
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

// dispatch triggers the automated Applications that push affects and answers.
func (h *GitWebhookHandler) dispatch(w http.ResponseWriter, r *http.Request, d delivery, push PushEvent) {
	switch {
	case push.Deleted:
		h.ignore(w, r, d, push, fmt.Sprintf("%s deleted: nothing to sync", push.Ref))
		return
	case push.Revision == "" && !push.TouchedHead:
		h.ignore(w, r, d, push, fmt.Sprintf("ref %q is neither a branch nor a tag: nothing to sync", push.Ref))
		return
	}
	apps, err := h.opts.Applications()
	if err != nil {
		st := apierrors.NewInternalError(err)
		if errors.Is(err, policy.ErrNotLoaded) {
			st = apierrors.NewServiceUnavailable("deputy has not loaded its Applications yet; see /readyz, then redeliver")
		}
		h.log.Error("git push webhook failed", h.logAttrs(r, d, push, "error", err.Error())...)
		h.opts.Metrics.gitWebhookDelivery(d.provider, "failed")
		writeAPIError(w, st, "")
		return
	}

	res := newGitWebhookResult(d, push)
	keys := repoKeys(push.RepoURLs)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), gitWebhookTriggerTimeout)
	defer cancel()
	var failed []string
	shuttingDown := false
	for _, app := range apps {
		if app == nil || !pushMatches(app, keys, push) {
			continue
		}
		name := app.Namespace + "/" + app.Name
		if app.Spec.SyncPolicy == nil || app.Spec.SyncPolicy.Automated == nil {
			res.Manual = append(res.Manual, name)
			continue
		}
		switch err := h.opts.Trigger(ctx, app, push); {
		case err == nil:
			res.Triggered = append(res.Triggered, name)
		case errors.Is(err, syncer.ErrOperationInProgress):
			res.AlreadyInProgress = append(res.AlreadyInProgress, name)
		default:
			shuttingDown = shuttingDown || errors.Is(err, syncer.ErrShuttingDown)
			failed = append(failed, name+": "+err.Error())
		}
	}
	slices.Sort(res.Triggered)
	slices.Sort(res.AlreadyInProgress)
	slices.Sort(res.Manual)
	slices.Sort(failed)
	m := h.opts.Metrics
	m.gitWebhookApplications("triggered", len(res.Triggered))
	m.gitWebhookApplications("in_progress", len(res.AlreadyInProgress))
	m.gitWebhookApplications("manual", len(res.Manual))
	m.gitWebhookApplications("failed", len(failed))

	attrs := h.logAttrs(r, d, push, "triggered", len(res.Triggered), "alreadyInProgress", len(res.AlreadyInProgress),
		"manual", len(res.Manual), "failed", len(failed))
	if len(failed) > 0 {
		h.log.Warn("git push webhook", append(attrs, "errors", strings.Join(failed, "; "))...)
		m.gitWebhookDelivery(d.provider, "failed")
		msg := fmt.Sprintf("failed to trigger the sync of %d application(s) for %s %s: %s (triggered: %d, already in progress: %d); "+
			"see deputy's log for request %s and redeliver", len(failed), push.Repository, push.Ref, strings.Join(failed, "; "),
			len(res.Triggered), len(res.AlreadyInProgress), requestID(r.Context()))
		st := apierrors.NewInternalError(errors.New(msg))
		if shuttingDown {
			st = apierrors.NewServiceUnavailable(msg)
		}
		writeAPIError(w, st, msg)
		return
	}
	h.log.Info("git push webhook", attrs...)
	m.gitWebhookDelivery(d.provider, "processed")
	if len(res.Triggered)+len(res.AlreadyInProgress)+len(res.Manual) == 0 {
		res.Message = "no Application tracks this repository and revision"
	}
	writeJSON(w, http.StatusOK, res)
}

func newGitWebhookResult(d delivery, push PushEvent) *GitWebhookResult {
	rev := push.Revision
	if rev == "" {
		rev = push.Ref
	}
	return &GitWebhookResult{Provider: d.provider, Event: d.event, Repository: push.Repository, Revision: rev,
		Triggered: []string{}, AlreadyInProgress: []string{}, Manual: []string{}}
}

// ignore answers 200 to an authenticated delivery deputy does not act on.
func (h *GitWebhookHandler) ignore(w http.ResponseWriter, r *http.Request, d delivery, push PushEvent, message string) {
	h.log.Info("git push webhook", h.logAttrs(r, d, push, "ignored", message)...)
	h.opts.Metrics.gitWebhookDelivery(d.provider, "ignored")
	res := newGitWebhookResult(d, push)
	res.Message = message
	writeJSON(w, http.StatusOK, res)
}

// unauthorized answers 401 with the one fixed message; reason goes to the log only.
func (h *GitWebhookHandler) unauthorized(w http.ResponseWriter, r *http.Request, d delivery, reason string) {
	h.log.Info("git push webhook rejected", h.logAttrs(r, d, PushEvent{}, "code", http.StatusUnauthorized, "reason", reason)...)
	h.opts.Metrics.gitWebhookDelivery(d.provider, "unauthorized")
	if r.ProtoMajor == 2 {
		// As deputy's API: an unauthenticated client does not keep an
		// HTTP/2 connection open.
		w.Header().Set("Connection", "close")
	}
	writeAPIError(w, apierrors.NewUnauthorized(gitWebhookUnauthorized), "")
}

// reject answers a client mistake other than authentication.
func (h *GitWebhookHandler) reject(w http.ResponseWriter, r *http.Request, d delivery, serr *statusError) {
	h.log.Info("git push webhook rejected", h.logAttrs(r, d, PushEvent{}, "code", serr.code, "reason", serr.message)...)
	if d.provider != "" {
		h.opts.Metrics.gitWebhookDelivery(d.provider, "rejected")
	}
	writeStatus(w, serr)
}

// logAttrs are the key/values of a delivery's log line. Secrets, tokens and
// signatures are never among them.
func (h *GitWebhookHandler) logAttrs(r *http.Request, d delivery, push PushEvent, more ...any) []any {
	attrs := []any{"requestID", requestID(r.Context()), "remote", r.RemoteAddr}
	if d.provider != "" {
		attrs = append(attrs, "provider", d.provider)
	}
	if d.event != "" {
		attrs = append(attrs, "event", d.event)
	}
	if d.id != "" {
		attrs = append(attrs, "delivery", d.id)
	}
	if push.Repository != "" {
		attrs = append(attrs, "repository", push.Repository, "ref", push.Ref)
	}
	if push.Commit != "" {
		attrs = append(attrs, "commit", push.Commit)
	}
	return append(attrs, more...)
}

// secret returns the provider's current secret; false when it is not
// configured or cannot be read.
func (h *GitWebhookHandler) secret(f *secretFile) ([]byte, bool) {
	if f == nil {
		return nil, false
	}
	v, err := f.get()
	return v, err == nil
}

func mediaType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

func unsupportedMedia(r *http.Request, hint string) *statusError {
	return &statusError{code: http.StatusUnsupportedMediaType, reason: metav1.StatusReasonUnsupportedMediaType,
		message: fmt.Sprintf("unsupported content type %q: %s", r.Header.Get("Content-Type"), hint)}
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

// secretFile is a secret read from a file and re-read when the file changes.
type secretFile struct {
	path string
	log  *slog.Logger

	mu    sync.Mutex
	info  os.FileInfo // of the file last read; nil after an error
	value []byte
	err   error
}

// get returns the secret: the file's content without surrounding white space
// (files usually end with a newline). The file is stat'ed on every call and
// read again only when it is another file (a Kubernetes Secret volume swaps a
// symlink), or its size or modification time changed.
func (s *secretFile) get() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := os.Stat(s.path)
	if err == nil && s.info != nil && os.SameFile(s.info, fi) && fi.Size() == s.info.Size() && fi.ModTime().Equal(s.info.ModTime()) {
		return s.value, nil
	}
	var v []byte
	if err == nil {
		v, err = readSecret(s.path)
	}
	if err != nil {
		if s.err == nil || s.err.Error() != err.Error() {
			s.log.Error("git webhook secret file cannot be used; its provider rejects every delivery until it is fixed",
				"file", s.path, "error", err.Error())
		}
		s.info, s.value, s.err = nil, nil, err
		return nil, err
	}
	if s.info != nil || s.err != nil {
		s.log.Info("git webhook secret file reloaded", "file", s.path)
	}
	s.info, s.value, s.err = fi, v, nil
	return v, nil
}

func readSecret(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("failed to read %s: %w", name, err)
	case len(b) > maxSecretFileBytes:
		return nil, fmt.Errorf("%s is larger than %d bytes: it should hold only the secret", name, maxSecretFileBytes)
	}
	v := bytes.TrimSpace(b)
	if len(v) == 0 {
		return nil, fmt.Errorf("%s is empty: write the webhook secret into it", name)
	}
	return v, nil
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
func parseGitHubPush(body []byte) (PushEvent, error) {
	var p githubPush
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &p); err != nil {
		return PushEvent{}, fmt.Errorf("the GitHub push event is not a JSON object of the documented format: %v", err)
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
func parseGitLabPush(body []byte) (PushEvent, error) {
	var p gitlabPush
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &p); err != nil {
		return PushEvent{}, fmt.Errorf("the GitLab push event is not a JSON object of the documented format: %v", err)
	}
	after := p.After
	if p.CheckoutSHA != "" && !isZeroSHA(after) {
		after = p.CheckoutSHA
	}
	return newPushEvent(ProviderGitLab, p.Ref, after, false, p.Project.DefaultBranch,
		p.Project.WebURL, p.Project.GitHTTPURL, p.Project.GitSSHURL,
		p.Repository.Homepage, p.Repository.GitHTTPURL, p.Repository.GitSSHURL)
}

func newPushEvent(provider, ref, after string, deleted bool, defaultBranch string, urls ...string) (PushEvent, error) {
	if ref == "" {
		return PushEvent{}, fmt.Errorf("the %s push event has no ref", providerTitle(provider))
	}
	ev := PushEvent{Provider: provider, Ref: ref, DefaultBranch: defaultBranch, Deleted: deleted || isZeroSHA(after)}
	if !ev.Deleted {
		ev.Commit = after
	}
	for _, u := range urls {
		if u != "" && !slices.Contains(ev.RepoURLs, u) {
			ev.RepoURLs = append(ev.RepoURLs, u)
		}
	}
	if len(repoKeys(ev.RepoURLs)) == 0 {
		return PushEvent{}, fmt.Errorf("the %s push event names no repository URL deputy can read", providerTitle(provider))
	}
	ev.Repository = ev.RepoURLs[0]
	if name, ok := strings.CutPrefix(ref, "refs/heads/"); ok && name != "" {
		ev.RefType, ev.Revision = RefBranch, name
		ev.TouchedHead = defaultBranch != "" && name == defaultBranch
	} else if name, ok := strings.CutPrefix(ref, "refs/tags/"); ok && name != "" {
		ev.RefType, ev.Revision = RefTag, name
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
func parseGitWebhookForm(body []byte) (PushEvent, error) {
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return PushEvent{}, fmt.Errorf("the form cannot be parsed as application/x-www-form-urlencoded: %v", err)
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
		return PushEvent{}, err
	}
	rev, err := field("revision")
	if err != nil {
		return PushEvent{}, err
	}
	def, err := field("defaultBranch")
	if err != nil {
		return PushEvent{}, err
	}
	switch {
	case repo == "":
		return PushEvent{}, errors.New("form field repoURL is required: the repository's URL, as Applications name it in spec.source.repoURL")
	case repoKey(repo) == "":
		return PushEvent{}, fmt.Errorf("repoURL %q names no repository: give https://host/path, ssh://user@host/path, user@host:path or file:///path", repo)
	case rev == "":
		return PushEvent{}, errors.New("form field revision is required: the pushed branch or tag (main, refs/heads/main, refs/tags/v1.2.0) or HEAD")
	}
	for _, f := range []struct{ name, v string }{{"revision", rev}, {"defaultBranch", def}} {
		if len(f.v) > maxRevisionLength {
			return PushEvent{}, fmt.Errorf("%s is longer than %d characters", f.name, maxRevisionLength)
		}
		if strings.IndexFunc(f.v, func(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }) >= 0 {
			return PushEvent{}, fmt.Errorf("%s %q contains blanks or control characters: give a branch or tag name", f.name, f.v)
		}
	}
	if isCommitSHA(rev) {
		return PushEvent{}, fmt.Errorf("revision %q is a commit SHA: give the branch or tag that was pushed", rev)
	}
	ev := PushEvent{Provider: ProviderForm, Repository: repo, RepoURLs: []string{repo}, Ref: rev, DefaultBranch: def}
	switch {
	case rev == "HEAD":
		// The default branch moved; its name is known only if given.
		ev.RefType, ev.Revision, ev.TouchedHead = RefBranch, def, true
	case strings.HasPrefix(rev, "refs/heads/"):
		ev.RefType, ev.Revision = RefBranch, strings.TrimPrefix(rev, "refs/heads/")
	case strings.HasPrefix(rev, "refs/tags/"):
		ev.RefType, ev.Revision = RefTag, strings.TrimPrefix(rev, "refs/tags/")
	case strings.HasPrefix(rev, "refs/"):
		return PushEvent{}, fmt.Errorf("revision %q is neither a branch (refs/heads/…) nor a tag (refs/tags/…)", rev)
	default:
		ev.RefType, ev.Revision = RefUnknown, rev
	}
	if ev.Revision == "" && !ev.TouchedHead {
		return PushEvent{}, fmt.Errorf("revision %q names no branch or tag", rev)
	}
	if def != "" && ev.RefType != RefTag && ev.Revision == def {
		ev.TouchedHead = true
	}
	return ev, nil
}

// pushMatches says whether push affects app: same repository (keys are the
// push's repoKeys) and a targetRevision the push moved.
func pushMatches(app *v1alpha1.Application, keys []string, push PushEvent) bool {
	k := repoKey(app.Spec.Source.RepoURL)
	return k != "" && slices.Contains(keys, k) && revisionMatches(app.Spec.Source.TargetRevision, push)
}

// revisionMatches is Argo CD's sourceRevisionHasChanged, stricter about the
// ref type when targetRevision spells it out, and never true for a commit SHA.
func revisionMatches(target string, push PushEvent) bool {
	switch {
	case target == "" || target == "HEAD":
		return push.TouchedHead
	case isCommitSHA(target):
		return false
	}
	if name, ok := strings.CutPrefix(target, "refs/heads/"); ok {
		return push.RefType != RefTag && name == push.Revision
	}
	if name, ok := strings.CutPrefix(target, "refs/tags/"); ok {
		return push.RefType != RefBranch && name == push.Revision
	}
	return target == push.Revision
}

// isCommitSHA: a full SHA-1 or SHA-256 object name.
func isCommitSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// isZeroSHA: the null object name Git servers send for a deleted ref.
func isZeroSHA(s string) bool {
	return s != "" && strings.Trim(s, "0") == ""
}

func repoKeys(urls []string) []string {
	var keys []string
	for _, u := range urls {
		if k := repoKey(u); k != "" && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// repoKey is the identity of a repository URL for webhook matching, or ""
// when the URL names none. It follows what Argo CD's webhook accepts as the
// same repository (util/webhook GetWebURLRegex, with util/git NormalizeGitURL's
// lower-casing): the scheme (https, http, ssh, git), credentials and port are
// ignored; scp-like user@host:path is ssh://user@host/path; an ssh. or altssh.
// host prefix is dropped (GitHub's ssh.github.com); host and path compare
// case-insensitively; a trailing "/" and ".git" are dropped. So
// https://github.com/Org/Repo, git@github.com:org/repo.git and
// ssh://git@github.com:22/org/repo/ are one repository.
//
// file:// URLs and local paths keep their case and compare by cleaned path.
func repoKey(raw string) string {
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

package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/apps/gitpush"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// GitWebhookPath is where Git servers announce pushes (Argo CD's path).
const GitWebhookPath = "/api/webhook"

// Providers, as gitpush.Push.Provider and the answer name them.
const (
	ProviderGitHub = "github"
	ProviderGitLab = "gitlab"
	// ProviderForm is the plain form any other sender (a CI job, a script)
	// posts: repoURL and revision, with the token in X-Deputy-Webhook-Token.
	ProviderForm = "form"
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

// GitWebhookOptions configure the GitWebhookHandler. Applications, Trigger
// and MaxPayloadBytes are required.
type GitWebhookOptions struct {
	// GitHubSecretFile, GitLabSecretFile and TokenFile name the files of
	// each sender's shared secret (sync.webhook.githubSecretFile,
	// gitlabSecretFile, tokenFile): GitHub's HMAC secret, GitLab's token,
	// the X-Deputy-Webhook-Token of the plain form. They are read at start
	// and again when they change. A provider whose secret file is not set
	// rejects every delivery with 401.
	GitHubSecretFile, GitLabSecretFile, TokenFile string
	// MaxPayloadBytes bounds a request body (413 above it;
	// sync.webhook.maxPayloadBytes, whose default the composition root
	// applies).
	MaxPayloadBytes int64
	// Applications returns every Application deputy knows
	// (apps.PushTargets.List). The handler reads them and never modifies
	// them. policy.ErrNotLoaded is answered 503.
	Applications func() ([]*v1alpha1.Application, error)
	// Trigger starts or records a sync of the automated app for push
	// (apps.PushTargets.Trigger). app is shared: read it, do not modify it.
	// It returns apps.ErrOperationInProgress while an operation of app is
	// pending or runs (reported as already in progress, not as an error).
	// ctx is not cancelled when the sender disconnects.
	Trigger func(ctx context.Context, app *v1alpha1.Application, push gitpush.Push) error
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
// Matching is apps.SyncPush's, which follows Argo CD (util/webhook): an
// Application matches when its spec.source.repoURL is the same repository as
// one of the payload's URLs (gitpush.RepositoryKey) and its targetRevision is
// the pushed branch or tag (with or without refs/heads/ or refs/tags/), or
// "" / HEAD for a push to the default branch. deputy is stricter on two
// points: refs/heads/x matches only a branch push and refs/tags/x only a tag
// push (Argo CD documents that it does not tell them apart), and a commit SHA
// never matches a push. Only Applications with spec.syncPolicy.automated are
// triggered; the others are listed as manual.
//
// Errors are metav1.Status objects: 405 for a method other than POST, 401 as
// above, 415 for a content type the sender does not use, 413 above
// MaxPayloadBytes, 400 for a payload that is not a push event, 503
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
// Errors: Applications or Trigger is nil, MaxPayloadBytes is not positive,
// or a configured secret file cannot be read or is empty.
func NewGitWebhookHandler(opts GitWebhookOptions) (*GitWebhookHandler, error) {
	if opts.Applications == nil || opts.Trigger == nil {
		return nil, errors.New("failed to create the Git push webhook: Applications and Trigger are required")
	}
	if opts.MaxPayloadBytes <= 0 {
		return nil, fmt.Errorf("failed to create the Git push webhook: MaxPayloadBytes must be positive, not %d", opts.MaxPayloadBytes)
	}
	h := &GitWebhookHandler{opts: opts, log: opts.Log, limit: opts.MaxPayloadBytes}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	for _, f := range []struct {
		into  **secretFile
		path  string
		field string
	}{
		{&h.github, opts.GitHubSecretFile, "sync.webhook.githubSecretFile"},
		{&h.gitlab, opts.GitLabSecretFile, "sync.webhook.gitlabSecretFile"},
		{&h.form, opts.TokenFile, "sync.webhook.tokenFile"},
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
		h.reject(w, r, delivery{}, newStatusError(http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
			fmt.Sprintf("method %s is not allowed: Git servers POST push events to %s", r.Method, GitWebhookPath)))
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

// dispatch triggers the automated Applications that push affects and answers.
func (h *GitWebhookHandler) dispatch(w http.ResponseWriter, r *http.Request, d delivery, push gitpush.Push) {
	switch {
	case push.Deleted:
		h.ignore(w, r, d, push, fmt.Sprintf("%s deleted: nothing to sync", push.Ref))
		return
	case push.Revision == "" && !push.TouchedHead:
		h.ignore(w, r, d, push, fmt.Sprintf("ref %q is neither a branch nor a tag: nothing to sync", push.Ref))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), gitWebhookTriggerTimeout)
	defer cancel()
	out, err := apps.SyncPush(ctx, pushTargets{list: h.opts.Applications, trigger: h.opts.Trigger}, push)
	if err != nil {
		st := apierrors.NewInternalError(err)
		if errors.Is(err, policy.ErrNotLoaded) {
			st = apierrors.NewServiceUnavailable("deputy has not loaded its Applications yet; see /readyz, then redeliver")
		}
		h.log.Error("git push webhook failed", h.logAttrs(r, d, push, "error", err.Error())...)
		h.opts.Metrics.gitWebhookDelivery(d.provider, "failed")
		writeStatus(w, fromAPIError(st))
		return
	}

	res := newGitWebhookResult(d, push)
	res.Triggered = append(res.Triggered, out.Triggered...)
	res.AlreadyInProgress = append(res.AlreadyInProgress, out.AlreadyInProgress...)
	res.Manual = append(res.Manual, out.Manual...)
	failed := out.Failed
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
		if out.ShuttingDown {
			st = apierrors.NewServiceUnavailable(msg)
		}
		writeStatus(w, fromAPIError(st).withMessage(msg))
		return
	}
	h.log.Info("git push webhook", attrs...)
	m.gitWebhookDelivery(d.provider, "processed")
	if len(res.Triggered)+len(res.AlreadyInProgress)+len(res.Manual) == 0 {
		res.Message = "no Application tracks this repository and revision"
	}
	writeJSON(w, http.StatusOK, res)
}

// pushTargets adapts the handler's Applications and Trigger to
// apps.PushTargets.
type pushTargets struct {
	list    func() ([]*v1alpha1.Application, error)
	trigger func(ctx context.Context, app *v1alpha1.Application, push gitpush.Push) error
}

// List implements apps.PushTargets.
func (t pushTargets) List() ([]*v1alpha1.Application, error) { return t.list() }

// Trigger implements apps.PushTargets.
func (t pushTargets) Trigger(ctx context.Context, app *v1alpha1.Application, push gitpush.Push) error {
	return t.trigger(ctx, app, push)
}

func newGitWebhookResult(d delivery, push gitpush.Push) *GitWebhookResult {
	rev := push.Revision
	if rev == "" {
		rev = push.Ref
	}
	return &GitWebhookResult{Provider: d.provider, Event: d.event, Repository: push.Repository, Revision: rev,
		Triggered: []string{}, AlreadyInProgress: []string{}, Manual: []string{}}
}

// ignore answers 200 to an authenticated delivery deputy does not act on.
func (h *GitWebhookHandler) ignore(w http.ResponseWriter, r *http.Request, d delivery, push gitpush.Push, message string) {
	h.log.Info("git push webhook", h.logAttrs(r, d, push, "ignored", message)...)
	h.opts.Metrics.gitWebhookDelivery(d.provider, "ignored")
	res := newGitWebhookResult(d, push)
	res.Message = message
	writeJSON(w, http.StatusOK, res)
}

// unauthorized answers 401 with the one fixed message; reason goes to the log only.
func (h *GitWebhookHandler) unauthorized(w http.ResponseWriter, r *http.Request, d delivery, reason string) {
	h.log.Info("git push webhook rejected", h.logAttrs(r, d, gitpush.Push{}, "code", http.StatusUnauthorized, "reason", reason)...)
	h.opts.Metrics.gitWebhookDelivery(d.provider, "unauthorized")
	if r.ProtoMajor == 2 {
		// As deputy's API: an unauthenticated client does not keep an
		// HTTP/2 connection open.
		w.Header().Set("Connection", "close")
	}
	writeStatus(w, fromAPIError(apierrors.NewUnauthorized(gitWebhookUnauthorized)))
}

// reject answers a client mistake other than authentication.
func (h *GitWebhookHandler) reject(w http.ResponseWriter, r *http.Request, d delivery, serr *statusError) {
	h.log.Info("git push webhook rejected", h.logAttrs(r, d, gitpush.Push{}, "code", serr.code(), "reason", serr.Error())...)
	if d.provider != "" {
		h.opts.Metrics.gitWebhookDelivery(d.provider, "rejected")
	}
	writeStatus(w, serr)
}

// logAttrs are the key/values of a delivery's log line. Secrets, tokens and
// signatures are never among them.
func (h *GitWebhookHandler) logAttrs(r *http.Request, d delivery, push gitpush.Push, more ...any) []any {
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

func mediaType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

func unsupportedMedia(r *http.Request, hint string) *statusError {
	return newStatusError(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
		fmt.Sprintf("unsupported content type %q: %s", r.Header.Get("Content-Type"), hint))
}

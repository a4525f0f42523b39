package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/apps/gitpush"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

const (
	testGitHubSecret = "gh-Secret-0f1e2d3c"
	testGitLabSecret = "gl-token-4b5a6978"
	testFormToken    = "form-token-8c9dab"
)

// gitApp is an Application of repoURL at targetRevision; automated sets
// spec.syncPolicy.automated.
func gitApp(ns, name, repoURL, target string, automated bool) *v1alpha1.Application {
	a := &v1alpha1.Application{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ApplicationSpec{
			Project: "default",
			Source:  v1alpha1.ApplicationSource{RepoURL: repoURL, TargetRevision: target},
		},
	}
	if automated {
		a.Spec.SyncPolicy = &v1alpha1.SyncPolicy{Automated: &v1alpha1.SyncPolicyAutomated{}}
	}
	return a
}

// gitLogBuffer is a goroutine-safe log sink.
type gitLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *gitLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *gitLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// loggedSignature finds an HMAC-SHA256 signature (64 hex digits; commit
// SHAs, which may be logged, have 40) in the log.
var loggedSignature = regexp.MustCompile(`[0-9a-f]{64}`)

type gitWebhookFixture struct {
	t        *testing.T
	dir      string
	handler  *GitWebhookHandler
	metrics  *Metrics
	logs     *gitLogBuffer
	mu       sync.Mutex
	apps     []*v1alpha1.Application
	appsErr  error
	triggers map[string]error // namespace/name → what Trigger returns
	got      []string         // namespace/name of every Trigger call
	pushes   []gitpush.Push
}

// gitWebhookTestMaxPayload is the fixture's body limit unless settings set
// one: deputy's default (sync.webhook.maxPayloadBytes), 25 MiB.
const gitWebhookTestMaxPayload = 25 << 20

// newGitWebhookFixture writes the three secrets (unless settings is given:
// its secret files and body limit are used) and returns a handler over apps.
func newGitWebhookFixture(t *testing.T, list []*v1alpha1.Application, settings *GitWebhookOptions) *gitWebhookFixture {
	t.Helper()
	f := &gitWebhookFixture{t: t, dir: t.TempDir(), apps: list, triggers: map[string]error{}, logs: &gitLogBuffer{}, metrics: NewMetrics()}
	if settings == nil {
		settings = &GitWebhookOptions{
			GitHubSecretFile: f.writeSecret("github", testGitHubSecret+"\n"),
			GitLabSecretFile: f.writeSecret("gitlab", testGitLabSecret+"\n"),
			TokenFile:        f.writeSecret("token", testFormToken),
		}
	}
	if settings.MaxPayloadBytes == 0 {
		settings.MaxPayloadBytes = gitWebhookTestMaxPayload
	}
	h, err := NewGitWebhookHandler(GitWebhookOptions{
		GitHubSecretFile: settings.GitHubSecretFile, GitLabSecretFile: settings.GitLabSecretFile, TokenFile: settings.TokenFile,
		MaxPayloadBytes: settings.MaxPayloadBytes,
		Applications: func() ([]*v1alpha1.Application, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.apps, f.appsErr
		},
		Trigger: func(ctx context.Context, app *v1alpha1.Application, push gitpush.Push) error {
			if ctx.Err() != nil {
				t.Errorf("Trigger called with an ended context: %v", ctx.Err())
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			key := app.Namespace + "/" + app.Name
			f.got = append(f.got, key)
			f.pushes = append(f.pushes, push)
			return f.triggers[key]
		},
		Log:     slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: f.metrics,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.handler = h
	t.Cleanup(func() {
		logs := f.logs.String()
		for _, secret := range []string{testGitHubSecret, testGitLabSecret, testFormToken} {
			if strings.Contains(logs, secret) {
				t.Errorf("a secret reached the log (%q):\n%s", secret, logs)
			}
		}
		if loggedSignature.MatchString(logs) {
			t.Errorf("a signature reached the log:\n%s", logs)
		}
	})
	return f
}

func (f *gitWebhookFixture) writeSecret(name, value string) string {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, []byte(value), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *gitWebhookFixture) triggered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

func (f *gitWebhookFixture) serve(r *http.Request) response {
	f.t.Helper()
	return serve(f.t, f.handler, r)
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// editJSON decodes b, lets edit change it, and encodes it again.
func editJSON(t *testing.T, b []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func githubSignature(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// githubRequest is a GitHub delivery of body, signed with secret ("" sends
// no signature).
func githubRequest(t *testing.T, event, secret, contentType string, body []byte) *http.Request {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, GitWebhookPath, bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	r.Header.Set("X-GitHub-Event", event)
	r.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	r.Header.Set("User-Agent", "GitHub-Hookshot/044aadd")
	if secret != "" {
		r.Header.Set("X-Hub-Signature-256", githubSignature(secret, body))
	}
	return r
}

func gitlabRequest(t *testing.T, event, token string, body io.Reader) *http.Request {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, GitWebhookPath, body)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Gitlab-Event", event)
	r.Header.Set("X-Gitlab-Event-UUID", "13792a34-cac6-4fda-95a8-c58e00a3954e")
	if token != "" {
		r.Header.Set("X-Gitlab-Token", token)
	}
	return r
}

func formRequest(t *testing.T, token string, form url.Values) *http.Request {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, GitWebhookPath, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		r.Header.Set("X-Deputy-Webhook-Token", token)
	}
	return r
}

func decodeResult(t *testing.T, got response) GitWebhookResult {
	t.Helper()
	if got.code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", got.code, got.body)
	}
	if ct := got.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var res GitWebhookResult
	dec := json.NewDecoder(bytes.NewReader(got.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("the answer is not a GitWebhookResult: %v: %s", err, got.body)
	}
	return res
}

func decodeStatus(t *testing.T, got response, code int) metav1.Status {
	t.Helper()
	if got.code != code {
		t.Fatalf("status %d, want %d: %s", got.code, code, got.body)
	}
	var st metav1.Status
	if err := json.Unmarshal(got.body, &st); err != nil || st.Kind != "Status" || st.APIVersion != "v1" ||
		st.Status != metav1.StatusFailure || int(st.Code) != code || st.Message == "" {
		t.Fatalf("the answer is not a complete metav1.Status for %d (%v): %s", code, err, got.body)
	}
	return st
}

// githubApps track binkkatal/sample_app (the GitHub fixture, default branch
// master) in every spelling, and some that must not match.
func githubApps() []*v1alpha1.Application {
	return []*v1alpha1.Application{
		gitApp("apps", "on-master", "https://github.com/binkkatal/sample_app", "master", true),
		gitApp("apps", "on-head-empty", "git@github.com:binkkatal/sample_app.git", "", true),
		gitApp("apps", "on-head", "ssh://git@github.com/BinkKatal/Sample_App/", "HEAD", true),
		gitApp("apps", "on-refs-heads", "https://user:pw@github.com:443/binkkatal/sample_app.git", "refs/heads/master", true),
		gitApp("team", "manual", "https://github.com/binkkatal/sample_app.git", "master", false),
		gitApp("team", "busy", "https://github.com/binkkatal/sample_app", "master", true),
		gitApp("apps", "other-branch", "https://github.com/binkkatal/sample_app", "develop", true),
		gitApp("apps", "other-repo", "https://github.com/binkkatal/sample_app2", "master", true),
		gitApp("apps", "other-host", "https://gitlab.com/binkkatal/sample_app", "master", true),
		gitApp("apps", "tag-named-master", "https://github.com/binkkatal/sample_app", "refs/tags/master", true),
		gitApp("apps", "pinned-sha", "https://github.com/binkkatal/sample_app", "fd489864e7642b48eaad6e3f155c10e46810ec72", true),
		gitApp("apps", "local", "/srv/git/sample_app", "master", true),
	}
}

func TestGitWebhookGitHubPushSyncsTheAutomatedApplicationsOfThePushedBranch(t *testing.T) {
	body := readFixture(t, "github-push.json")
	want := GitWebhookResult{
		Provider: "github", Event: "push", Repository: "https://github.com/binkkatal/sample_app", Revision: "master",
		Triggered:         []string{"apps/on-head", "apps/on-head-empty", "apps/on-master", "apps/on-refs-heads"},
		AlreadyInProgress: []string{"team/busy"},
		Manual:            []string{"team/manual"},
	}
	for _, tc := range []struct {
		name        string
		contentType string
		body        []byte
	}{
		{"as JSON", "application/json", body},
		{"as GitHub's form encoding (payload=...), signed over the raw form body", "application/x-www-form-urlencoded",
			[]byte(url.Values{"payload": {string(body)}}.Encode())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newGitWebhookFixture(t, githubApps(), nil)
			f.triggers["team/busy"] = apps.ErrOperationInProgress
			got := decodeResult(t, f.serve(githubRequest(t, "push", testGitHubSecret, tc.contentType, tc.body)))
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("answer (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]string{"apps/on-head", "apps/on-head-empty", "apps/on-master", "apps/on-refs-heads", "team/busy"},
				sortedCopy(f.triggered())); d != "" {
				t.Errorf("Trigger calls (-want +got):\n%s", d)
			}
			wantPush := gitpush.Push{
				Provider: "github", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
				Repository: "https://github.com/binkkatal/sample_app",
				RepoURLs: []string{"https://github.com/binkkatal/sample_app", "https://github.com/binkkatal/sample_app.git",
					"git@github.com:binkkatal/sample_app.git", "git://github.com/binkkatal/sample_app.git"},
				Ref: "refs/heads/master", Revision: "master", RefType: gitpush.RefBranch, DefaultBranch: "master", TouchedHead: true,
				Commit: "fd489864e7642b48eaad6e3f155c10e46810ec72",
			}
			if d := cmp.Diff(wantPush, f.pushes[0]); d != "" {
				t.Errorf("gitpush.Push given to Trigger (-want +got):\n%s", d)
			}
			logs := f.logs.String()
			if n := strings.Count(logs, `"msg":"git push webhook"`); n != 1 {
				t.Errorf("%d delivery log lines, want 1:\n%s", n, logs)
			}
			for _, s := range []string{`"provider":"github"`, `"ref":"refs/heads/master"`, `"triggered":4`, `"alreadyInProgress":1`, `"manual":1`,
				`"delivery":"72d3162e-cc78-11e3-81ab-4c9367dc0958"`} {
				if !strings.Contains(logs, s) {
					t.Errorf("log lacks %s:\n%s", s, logs)
				}
			}
			if v := counterValue(t, f.metrics, "deputy_git_webhook_deliveries_total", map[string]string{"provider": "github", "result": "processed"}); v != 1 {
				t.Errorf("processed deliveries = %v, want 1", v)
			}
			if v := counterValue(t, f.metrics, "deputy_git_webhook_applications_total", map[string]string{"result": "triggered"}); v != 4 {
				t.Errorf("triggered applications = %v, want 4", v)
			}
		})
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestGitWebhookRejectsEveryUnauthenticatedDeliveryWithTheSameAnswer(t *testing.T) {
	body := readFixture(t, "github-push.json")
	gitlabBody := readFixture(t, "gitlab-push-hook.json")
	form := url.Values{"repoURL": {"https://github.com/binkkatal/sample_app"}, "revision": {"master"}}
	for _, tc := range []struct {
		name     string
		settings func(f *gitWebhookFixture) *GitWebhookOptions
		req      func(t *testing.T) *http.Request
	}{
		{name: "a GitHub delivery without a signature", req: func(t *testing.T) *http.Request {
			return githubRequest(t, "push", "", "application/json", body)
		}},
		{name: "a GitHub delivery signed with another secret", req: func(t *testing.T) *http.Request {
			return githubRequest(t, "push", "another secret", "application/json", body)
		}},
		{name: "a GitHub delivery whose body was changed after signing", req: func(t *testing.T) *http.Request {
			r := githubRequest(t, "push", testGitHubSecret, "application/json", body)
			r.Body = io.NopCloser(bytes.NewReader(bytes.Replace(body, []byte("master"), []byte("mastex"), 1)))
			return r
		}},
		{name: "a GitHub delivery with a malformed signature", req: func(t *testing.T) *http.Request {
			r := githubRequest(t, "push", testGitHubSecret, "application/json", body)
			r.Header.Set("X-Hub-Signature-256", strings.TrimPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256="))
			return r
		}},
		{name: "a GitHub delivery with only the legacy SHA-1 signature", req: func(t *testing.T) *http.Request {
			r := githubRequest(t, "push", "", "application/json", body)
			mac := hmac.New(sha256.New, []byte(testGitHubSecret))
			mac.Write(body)
			r.Header.Set("X-Hub-Signature", "sha1="+hex.EncodeToString(mac.Sum(nil))[:40])
			return r
		}},
		{name: "a signed ping without the right signature", req: func(t *testing.T) *http.Request {
			return githubRequest(t, "ping", "another secret", "application/json", []byte(`{"zen":"Keep it logically awesome."}`))
		}},
		{name: "a GitHub delivery when no GitHub secret is configured (unlike Argo CD, no unsigned payloads)",
			settings: func(f *gitWebhookFixture) *GitWebhookOptions {
				return &GitWebhookOptions{GitLabSecretFile: f.writeSecret("gitlab", testGitLabSecret), TokenFile: f.writeSecret("token", testFormToken)}
			},
			req: func(t *testing.T) *http.Request { return githubRequest(t, "push", "", "application/json", body) }},
		{name: "a GitLab delivery without a token", req: func(t *testing.T) *http.Request {
			return gitlabRequest(t, "Push Hook", "", bytes.NewReader(gitlabBody))
		}},
		{name: "a GitLab delivery with a wrong token", req: func(t *testing.T) *http.Request {
			return gitlabRequest(t, "Push Hook", testGitLabSecret+"x", bytes.NewReader(gitlabBody))
		}},
		{name: "a GitLab delivery carrying the GitHub secret", req: func(t *testing.T) *http.Request {
			return gitlabRequest(t, "Push Hook", testGitHubSecret, bytes.NewReader(gitlabBody))
		}},
		{name: "a GitLab delivery when no GitLab secret is configured",
			settings: func(f *gitWebhookFixture) *GitWebhookOptions {
				return &GitWebhookOptions{GitHubSecretFile: f.writeSecret("github", testGitHubSecret), TokenFile: f.writeSecret("token", testFormToken)}
			},
			req: func(t *testing.T) *http.Request {
				return gitlabRequest(t, "Push Hook", "", bytes.NewReader(gitlabBody))
			}},
		{name: "a form without a token", req: func(t *testing.T) *http.Request { return formRequest(t, "", form) }},
		{name: "a form with a wrong token", req: func(t *testing.T) *http.Request { return formRequest(t, "wrong", form) }},
		{name: "a form with the token in the wrong header", req: func(t *testing.T) *http.Request {
			r := formRequest(t, "", form)
			r.Header.Set("Authorization", "Bearer "+testFormToken)
			return r
		}},
		{name: "a form when no token is configured",
			settings: func(f *gitWebhookFixture) *GitWebhookOptions {
				return &GitWebhookOptions{GitHubSecretFile: f.writeSecret("github", testGitHubSecret), GitLabSecretFile: f.writeSecret("gitlab", testGitLabSecret)}
			},
			req: func(t *testing.T) *http.Request { return formRequest(t, "", form) }},
		{name: "a form when nothing at all is configured",
			settings: func(*gitWebhookFixture) *GitWebhookOptions { return &GitWebhookOptions{} },
			req:      func(t *testing.T) *http.Request { return formRequest(t, testFormToken, form) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newGitWebhookFixture(t, githubApps(), nil)
			if tc.settings != nil {
				f = newGitWebhookFixture(t, githubApps(), tc.settings(f))
			}
			got := f.serve(tc.req(t))
			st := decodeStatus(t, got, http.StatusUnauthorized)
			want := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Message: gitWebhookUnauthorized, Reason: metav1.StatusReasonUnauthorized, Code: http.StatusUnauthorized}
			if d := cmp.Diff(want, st); d != "" {
				t.Errorf("401 answer (-want +got):\n%s", d)
			}
			wantBody, _ := json.Marshal(&want)
			if string(bytes.TrimSpace(got.body)) != string(wantBody) {
				t.Errorf("body = %s, want exactly %s", got.body, wantBody)
			}
			if calls := f.triggered(); len(calls) != 0 {
				t.Errorf("an unauthenticated delivery triggered %v", calls)
			}
			if !strings.Contains(f.logs.String(), `"msg":"git push webhook rejected"`) {
				t.Errorf("no rejection log line:\n%s", f.logs.String())
			}
		})
	}
}

// failingBody fails the test when the handler reads it.
type failingBody struct{ t *testing.T }

func (b failingBody) Read([]byte) (int, error) {
	b.t.Error("the body was read")
	return 0, errors.New("must not be read")
}

func TestGitWebhookChecksHeadersBeforeReadingTheBody(t *testing.T) {
	f := newGitWebhookFixture(t, githubApps(), nil)
	for _, tc := range []struct {
		name string
		req  func() *http.Request
		code int
	}{
		{"a GitLab delivery with a wrong token", func() *http.Request {
			return gitlabRequest(t, "Push Hook", "wrong", failingBody{t})
		}, http.StatusUnauthorized},
		{"a GitLab event deputy does not act on", func() *http.Request {
			return gitlabRequest(t, "Merge Request Hook", testGitLabSecret, failingBody{t})
		}, http.StatusOK},
		{"a GitHub delivery without a signature", func() *http.Request {
			r := githubRequest(t, "push", "", "application/json", nil)
			r.Body = io.NopCloser(failingBody{t})
			return r
		}, http.StatusUnauthorized},
		{"a GitHub delivery of another content type", func() *http.Request {
			r := githubRequest(t, "push", testGitHubSecret, "text/plain", nil)
			r.Body = io.NopCloser(failingBody{t})
			return r
		}, http.StatusUnsupportedMediaType},
		{"a form with a wrong token", func() *http.Request {
			r := formRequest(t, "wrong", nil)
			r.Body = io.NopCloser(failingBody{t})
			return r
		}, http.StatusUnauthorized},
		{"a form of another content type", func() *http.Request {
			r := formRequest(t, testFormToken, nil)
			r.Header.Set("Content-Type", "application/json")
			r.Body = io.NopCloser(failingBody{t})
			return r
		}, http.StatusUnsupportedMediaType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := f.serve(tc.req())
			if got.code != tc.code {
				t.Errorf("status %d, want %d: %s", got.code, tc.code, got.body)
			}
		})
	}
}

func TestGitWebhookPushToAnotherBranchTriggersNothing(t *testing.T) {
	f := newGitWebhookFixture(t, githubApps(), nil)
	body := editJSON(t, readFixture(t, "github-push.json"), func(m map[string]any) { m["ref"] = "refs/heads/feature/login" })
	got := decodeResult(t, f.serve(githubRequest(t, "push", testGitHubSecret, "application/json", body)))
	want := GitWebhookResult{Provider: "github", Event: "push", Repository: "https://github.com/binkkatal/sample_app", Revision: "feature/login",
		Triggered: []string{}, AlreadyInProgress: []string{}, Manual: []string{}, Message: "no Application tracks this repository and revision"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("answer (-want +got):\n%s", d)
	}
	if calls := f.triggered(); len(calls) != 0 {
		t.Errorf("triggered %v", calls)
	}
}

func TestGitWebhookTagPushes(t *testing.T) {
	list := []*v1alpha1.Application{
		gitApp("apps", "tag", "https://example.com/jsmith/example", "v1.0.0", true),
		gitApp("apps", "refs-tags", "git@example.com:jsmith/example.git", "refs/tags/v1.0.0", true),
		gitApp("apps", "branch-named-like-the-tag", "http://example.com/jsmith/example.git", "refs/heads/v1.0.0", true),
		gitApp("apps", "head", "http://example.com/jsmith/example.git", "HEAD", true),
		gitApp("apps", "other-tag", "http://example.com/jsmith/example.git", "v1.0.1", true),
		gitApp("apps", "manual", "http://example.com/jsmith/example", "v1.0.0", false),
	}
	t.Run("a GitLab Tag Push Hook syncs the Applications at that tag", func(t *testing.T) {
		f := newGitWebhookFixture(t, list, nil)
		got := decodeResult(t, f.serve(gitlabRequest(t, "Tag Push Hook", testGitLabSecret, bytes.NewReader(readFixture(t, "gitlab-tag-push-hook.json")))))
		want := GitWebhookResult{Provider: "gitlab", Event: "Tag Push Hook", Repository: "http://example.com/jsmith/example", Revision: "v1.0.0",
			Triggered: []string{"apps/refs-tags", "apps/tag"}, AlreadyInProgress: []string{}, Manual: []string{"apps/manual"}}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("answer (-want +got):\n%s", d)
		}
		if p := f.pushes[0]; p.RefType != gitpush.RefTag || p.Commit != "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7" || p.TouchedHead {
			t.Errorf("gitpush.Push = %+v", p)
		}
	})
	t.Run("a GitHub push of a tag named like the default branch does not touch HEAD", func(t *testing.T) {
		f := newGitWebhookFixture(t, githubApps(), nil)
		body := editJSON(t, readFixture(t, "github-push.json"), func(m map[string]any) { m["ref"] = "refs/tags/master" })
		got := decodeResult(t, f.serve(githubRequest(t, "push", testGitHubSecret, "application/json", body)))
		// A bare targetRevision names a branch or a tag (Argo CD's rule).
		want := []string{"apps/on-master", "apps/tag-named-master", "team/busy"}
		if d := cmp.Diff(want, got.Triggered); d != "" {
			t.Errorf("triggered (-want +got):\n%s", d)
		}
	})
}

func TestGitWebhookDefaultBranchAndHEAD(t *testing.T) {
	list := []*v1alpha1.Application{
		gitApp("apps", "head", "https://example.com/mike/diaspora", "HEAD", true),
		gitApp("apps", "empty", "ssh://git@example.com:2222/mike/diaspora.git", "", true),
		gitApp("apps", "master", "git@example.com:mike/diaspora", "master", true),
		gitApp("apps", "develop", "git@example.com:mike/diaspora", "develop", true),
	}
	body := readFixture(t, "gitlab-push-hook.json")
	t.Run("a push to the default branch syncs HEAD, empty and the branch itself", func(t *testing.T) {
		f := newGitWebhookFixture(t, list, nil)
		got := decodeResult(t, f.serve(gitlabRequest(t, "Push Hook", testGitLabSecret, bytes.NewReader(body))))
		if d := cmp.Diff([]string{"apps/empty", "apps/head", "apps/master"}, got.Triggered); d != "" {
			t.Errorf("triggered (-want +got):\n%s", d)
		}
	})
	t.Run("a push to another branch leaves HEAD alone", func(t *testing.T) {
		f := newGitWebhookFixture(t, list, nil)
		develop := editJSON(t, body, func(m map[string]any) { m["ref"] = "refs/heads/develop" })
		got := decodeResult(t, f.serve(gitlabRequest(t, "Push Hook", testGitLabSecret, bytes.NewReader(develop))))
		if d := cmp.Diff([]string{"apps/develop"}, got.Triggered); d != "" {
			t.Errorf("triggered (-want +got):\n%s", d)
		}
	})
	t.Run("a push without a known default branch leaves HEAD alone", func(t *testing.T) {
		f := newGitWebhookFixture(t, list, nil)
		noDefault := editJSON(t, body, func(m map[string]any) { delete(m["project"].(map[string]any), "default_branch") })
		got := decodeResult(t, f.serve(gitlabRequest(t, "Push Hook", testGitLabSecret, bytes.NewReader(noDefault))))
		if d := cmp.Diff([]string{"apps/master"}, got.Triggered); d != "" {
			t.Errorf("triggered (-want +got):\n%s", d)
		}
	})
}

func TestGitWebhookBranchDeletionTriggersNothing(t *testing.T) {
	zero := strings.Repeat("0", 40)
	for _, tc := range []struct {
		name string
		req  func(t *testing.T) *http.Request
	}{
		{"GitHub deleted: true", func(t *testing.T) *http.Request {
			body := editJSON(t, readFixture(t, "github-push.json"), func(m map[string]any) { m["deleted"], m["after"] = true, zero })
			return githubRequest(t, "push", testGitHubSecret, "application/json", body)
		}},
		{"GitHub-compatible sender with only after = 0000…", func(t *testing.T) *http.Request {
			body := editJSON(t, readFixture(t, "github-push.json"), func(m map[string]any) { delete(m, "deleted"); m["after"] = zero })
			return githubRequest(t, "push", testGitHubSecret, "application/json", body)
		}},
		{"GitLab after = 0000… and checkout_sha null", func(t *testing.T) *http.Request {
			body := editJSON(t, readFixture(t, "gitlab-push-hook.json"), func(m map[string]any) { m["after"], m["checkout_sha"] = zero, nil })
			return gitlabRequest(t, "Push Hook", testGitLabSecret, bytes.NewReader(body))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := append(githubApps(), gitApp("apps", "gitlab-master", "http://example.com/mike/diaspora", "master", true))
			f := newGitWebhookFixture(t, list, nil)
			got := decodeResult(t, f.serve(tc.req(t)))
			if len(got.Triggered) != 0 || !strings.Contains(got.Message, "deleted") {
				t.Errorf("answer = %+v, want nothing triggered and a deletion message", got)
			}
			if calls := f.triggered(); len(calls) != 0 {
				t.Errorf("triggered %v", calls)
			}
		})
	}
}

func TestGitWebhookGitHubPingAndOtherEvents(t *testing.T) {
	f := newGitWebhookFixture(t, githubApps(), nil)
	ping := decodeResult(t, f.serve(githubRequest(t, "ping", testGitHubSecret, "application/json",
		[]byte(`{"zen":"Keep it logically awesome.","hook_id":1,"hook":{"type":"Repository","events":["push"]}}`))))
	if ping.Event != "ping" || !strings.Contains(ping.Message, "ping") {
		t.Errorf("ping answer = %+v", ping)
	}
	issues := decodeResult(t, f.serve(githubRequest(t, "issues", testGitHubSecret, "application/json", readFixture(t, "github-push.json"))))
	if !strings.Contains(issues.Message, `"issues" ignored`) {
		t.Errorf("issues answer = %+v", issues)
	}
	gitlabOther := decodeResult(t, f.serve(gitlabRequest(t, "Pipeline Hook", testGitLabSecret, strings.NewReader(`{}`))))
	if !strings.Contains(gitlabOther.Message, `"Pipeline Hook" ignored`) {
		t.Errorf("GitLab Pipeline Hook answer = %+v", gitlabOther)
	}
	if calls := f.triggered(); len(calls) != 0 {
		t.Errorf("triggered %v", calls)
	}
	if v := counterValue(t, f.metrics, "deputy_git_webhook_deliveries_total", map[string]string{"provider": "github", "result": "ignored"}); v != 2 {
		t.Errorf("ignored GitHub deliveries = %v, want 2", v)
	}
}

func TestGitWebhookPlainForm(t *testing.T) {
	list := []*v1alpha1.Application{
		gitApp("ci", "main", "https://git.example.com/platform/deploy.git", "main", true),
		gitApp("ci", "head", "https://git.example.com/platform/deploy", "HEAD", true),
		gitApp("ci", "release", "git@git.example.com:platform/deploy", "refs/tags/v2", true),
		gitApp("ci", "local", "file:///srv/git/deploy", "main", true),
	}
	for _, tc := range []struct {
		name string
		form url.Values
		want []string
	}{
		{"a bare branch name", url.Values{"repoURL": {"git@git.example.com:Platform/deploy.git"}, "revision": {"main"}}, []string{"ci/main"}},
		{"refs/heads/", url.Values{"repoURL": {"https://git.example.com/platform/deploy"}, "revision": {"refs/heads/main"}}, []string{"ci/main"}},
		{"the default branch, named", url.Values{"repoURL": {"https://git.example.com/platform/deploy"}, "revision": {"main"}, "defaultBranch": {"main"}},
			[]string{"ci/head", "ci/main"}},
		{"HEAD, default branch unnamed", url.Values{"repoURL": {"https://git.example.com/platform/deploy"}, "revision": {"HEAD"}}, []string{"ci/head"}},
		{"HEAD, default branch named", url.Values{"repoURL": {"https://git.example.com/platform/deploy"}, "revision": {"HEAD"}, "defaultBranch": {"main"}},
			[]string{"ci/head", "ci/main"}},
		{"a bare tag name", url.Values{"repoURL": {"https://git.example.com/platform/deploy"}, "revision": {"v2"}}, []string{"ci/release"}},
		{"refs/tags/", url.Values{"repoURL": {"https://git.example.com/platform/deploy"}, "revision": {"refs/tags/v2"}}, []string{"ci/release"}},
		{"a branch named like the tag", url.Values{"repoURL": {"https://git.example.com/platform/deploy"}, "revision": {"refs/heads/v2"}}, nil},
		{"a local repository", url.Values{"repoURL": {"/srv/git/deploy/"}, "revision": {"main"}}, []string{"ci/local"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newGitWebhookFixture(t, list, nil)
			got := decodeResult(t, f.serve(formRequest(t, testFormToken, tc.form)))
			if d := cmp.Diff(tc.want, sortedCopy(f.triggered())); d != "" {
				t.Errorf("triggered (-want +got):\n%s", d)
			}
			if got.Provider != "form" {
				t.Errorf("provider = %q", got.Provider)
			}
		})
	}
	for _, tc := range []struct {
		name string
		body string
		want string
	}{
		{"no repoURL", "revision=main", "repoURL is required"},
		{"no revision", "repoURL=https://git.example.com/platform/deploy", "revision is required"},
		{"a repoURL that names no repository", "repoURL=https://git.example.com/&revision=main", "names no repository"},
		{"a revision given twice", "repoURL=https://git.example.com/a&revision=main&revision=dev", "given 2 times"},
		{"a commit SHA", "repoURL=https://git.example.com/a&revision=fd489864e7642b48eaad6e3f155c10e46810ec72", "is a commit SHA"},
		{"a ref that is neither branch nor tag", "repoURL=https://git.example.com/a&revision=refs/pull/1/head", "neither a branch"},
		{"blanks in the revision", "repoURL=https://git.example.com/a&revision=main%20x", "blanks or control characters"},
		{"a broken escape", "repoURL=%zz&revision=main", "cannot be parsed"},
	} {
		t.Run("400 for "+tc.name, func(t *testing.T) {
			f := newGitWebhookFixture(t, list, nil)
			r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, GitWebhookPath, strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
			r.Header.Set("X-Deputy-Webhook-Token", testFormToken)
			st := decodeStatus(t, f.serve(r), http.StatusBadRequest)
			if !strings.Contains(st.Message, tc.want) {
				t.Errorf("message %q lacks %q", st.Message, tc.want)
			}
		})
	}
}

func TestGitWebhookBodyTooLarge(t *testing.T) {
	f := newGitWebhookFixture(t, githubApps(), nil)
	settings := &GitWebhookOptions{
		GitHubSecretFile: f.writeSecret("github", testGitHubSecret), GitLabSecretFile: f.writeSecret("gitlab", testGitLabSecret),
		TokenFile: f.writeSecret("token", testFormToken), MaxPayloadBytes: 1024,
	}
	f = newGitWebhookFixture(t, githubApps(), settings)
	big := readFixture(t, "github-push.json") // ~3.6 KiB
	if len(big) <= 1024 {
		t.Fatalf("fixture is only %d bytes", len(big))
	}
	for _, tc := range []struct {
		name string
		req  func() *http.Request
	}{
		{"GitHub, length declared", func() *http.Request { return githubRequest(t, "push", testGitHubSecret, "application/json", big) }},
		{"GitHub, chunked", func() *http.Request {
			r := githubRequest(t, "push", testGitHubSecret, "application/json", big)
			r.ContentLength, r.Body = -1, io.NopCloser(unknownLength{bytes.NewReader(big)})
			return r
		}},
		{"GitLab", func() *http.Request {
			return gitlabRequest(t, "Push Hook", testGitLabSecret, bytes.NewReader(readFixture(t, "gitlab-push-hook.json")))
		}},
		{"form", func() *http.Request {
			return formRequest(t, testFormToken, url.Values{"repoURL": {strings.Repeat("a", 2000)}, "revision": {"main"}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := decodeStatus(t, f.serve(tc.req()), http.StatusRequestEntityTooLarge)
			if st.Reason != metav1.StatusReasonRequestEntityTooLarge {
				t.Errorf("reason = %q", st.Reason)
			}
		})
	}
	if calls := f.triggered(); len(calls) != 0 {
		t.Errorf("triggered %v", calls)
	}
}

func TestGitWebhookMethodAndContentType(t *testing.T) {
	f := newGitWebhookFixture(t, githubApps(), nil)
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodHead} {
		got := f.serve(httptest.NewRequestWithContext(t.Context(), m, GitWebhookPath, nil))
		if got.code != http.StatusMethodNotAllowed || got.header.Get("Allow") != http.MethodPost {
			t.Errorf("%s: %d Allow=%q, want 405 Allow=POST", m, got.code, got.header.Get("Allow"))
		}
		if m != http.MethodHead {
			decodeStatus(t, got, http.StatusMethodNotAllowed)
		}
	}
	r := gitlabRequest(t, "Push Hook", testGitLabSecret, bytes.NewReader(readFixture(t, "gitlab-push-hook.json")))
	r.Header.Set("Content-Type", "text/plain")
	decodeStatus(t, f.serve(r), http.StatusUnsupportedMediaType)

	for _, body := range []string{"", "null", "[]", "{", `{"ref":"refs/heads/master"}`, `{"repository":{"html_url":"https://github.com/a/b"}}`, `{"ref":1}`} {
		got := f.serve(githubRequest(t, "push", testGitHubSecret, "application/json", []byte(body)))
		decodeStatus(t, got, http.StatusBadRequest)
	}
	form := githubRequest(t, "push", testGitHubSecret, "application/x-www-form-urlencoded", []byte("nopayload=1"))
	decodeStatus(t, f.serve(form), http.StatusBadRequest)
}

func TestGitWebhookTriggerFailures(t *testing.T) {
	body := readFixture(t, "github-push.json")
	t.Run("503 before the Applications are loaded", func(t *testing.T) {
		f := newGitWebhookFixture(t, nil, nil)
		f.appsErr = policy.ErrNotLoaded
		decodeStatus(t, f.serve(githubRequest(t, "push", testGitHubSecret, "application/json", body)), http.StatusServiceUnavailable)
	})
	t.Run("500 naming the Application whose trigger failed, the others still triggered", func(t *testing.T) {
		f := newGitWebhookFixture(t, githubApps(), nil)
		f.triggers["apps/on-master"] = errors.New("the apiserver is unreachable")
		st := decodeStatus(t, f.serve(githubRequest(t, "push", testGitHubSecret, "application/json", body)), http.StatusInternalServerError)
		if !strings.Contains(st.Message, "apps/on-master: the apiserver is unreachable") || !strings.Contains(st.Message, "triggered: 4") {
			t.Errorf("message = %q", st.Message)
		}
		if n := len(f.triggered()); n != 5 {
			t.Errorf("%d Trigger calls, want 5 (every automated match)", n)
		}
	})
	t.Run("503 while deputy shuts down", func(t *testing.T) {
		f := newGitWebhookFixture(t, githubApps(), nil)
		f.triggers["apps/on-master"] = apps.ErrShuttingDown
		decodeStatus(t, f.serve(githubRequest(t, "push", testGitHubSecret, "application/json", body)), http.StatusServiceUnavailable)
	})
}

func TestGitWebhookFollowsSecretFileChanges(t *testing.T) {
	f := newGitWebhookFixture(t, nil, nil)
	path := filepath.Join(f.dir, "gitlab")
	status := func() int {
		return f.serve(gitlabRequest(t, "Pipeline Hook", testGitLabSecret, strings.NewReader("{}"))).code
	}
	statusWith := func(token string) int {
		return f.serve(gitlabRequest(t, "Pipeline Hook", token, strings.NewReader("{}"))).code
	}
	if c := status(); c != 200 {
		t.Fatalf("initial secret: %d", c)
	}
	// As a Kubernetes Secret volume updates: a new file renamed into place.
	tmp := filepath.Join(f.dir, "gitlab.tmp")
	if err := os.WriteFile(tmp, []byte("rotated-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if c := status(); c != 401 {
		t.Errorf("old secret after rotation: %d, want 401", c)
	}
	if c := statusWith("rotated-token"); c != 200 {
		t.Errorf("new secret after rotation: %d, want 200", c)
	}
	// Rewritten in place, another length.
	if err := os.WriteFile(path, []byte("in-place-token-longer"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := statusWith("in-place-token-longer"); c != 200 {
		t.Errorf("secret rewritten in place: %d, want 200", c)
	}
	// Removed: fail closed.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if c := statusWith("in-place-token-longer"); c != 401 {
		t.Errorf("secret file removed: %d, want 401", c)
	}
	// Emptied: fail closed too.
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := statusWith("in-place-token-longer"); c != 401 {
		t.Errorf("secret file empty: %d, want 401", c)
	}
	if err := os.WriteFile(path, []byte(testGitLabSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := status(); c != 200 {
		t.Errorf("secret file restored: %d, want 200", c)
	}
	logs := f.logs.String()
	if n := strings.Count(logs, "git webhook secret file cannot be used"); n != 2 {
		t.Errorf("%d error lines for the broken secret file, want 2 (one per distinct error):\n%s", n, logs)
	}
	if strings.Contains(logs, "rotated-token") || strings.Contains(logs, "in-place-token") {
		t.Errorf("a secret reached the log:\n%s", logs)
	}
}

func TestNewGitWebhookHandlerErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	list := func() ([]*v1alpha1.Application, error) { return nil, nil }
	trigger := func(context.Context, *v1alpha1.Application, gitpush.Push) error { return nil }
	for _, tc := range []struct {
		name string
		opts GitWebhookOptions
		want string
	}{
		{"no Applications", GitWebhookOptions{Trigger: trigger}, "Applications and Trigger are required"},
		{"no Trigger", GitWebhookOptions{Applications: list}, "Applications and Trigger are required"},
		{"no body limit", GitWebhookOptions{Applications: list, Trigger: trigger}, "MaxPayloadBytes must be positive"},
		{"a missing secret file", GitWebhookOptions{Applications: list, Trigger: trigger, MaxPayloadBytes: 1024,
			GitHubSecretFile: filepath.Join(dir, "missing")}, "sync.webhook.githubSecretFile"},
		{"an empty token file", GitWebhookOptions{Applications: list, Trigger: trigger, MaxPayloadBytes: 1024,
			TokenFile: empty}, "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewGitWebhookHandler(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestServerRoutesTheGitWebhookWithoutAClientCertificate(t *testing.T) {
	f := newGitWebhookFixture(t, githubApps(), nil)
	ca := newTestCA(t, "git-webhook-client-ca")
	m := NewMetrics()
	s := NewServer(ServerOptions{GitWebhook: f.handler, Metrics: m, Log: discardLog(),
		ClientAuth: NewClientCertAuth(newSwitchableVerifier(ca.pool()).VerifyOptions, []string{"kube-apiserver"}, discardLog()),
		Authorize:  http.NotFoundHandler()})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	body := readFixture(t, "github-push.json")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+GitWebhookPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", githubSignature(testGitHubSecret, body))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("POST %s without a client certificate: %d, want 200", GitWebhookPath, resp.StatusCode)
	}
	get, err := srv.Client().Get(srv.URL + GitWebhookPath)
	if err != nil {
		t.Fatal(err)
	}
	get.Body.Close()
	if get.StatusCode != http.StatusMethodNotAllowed || get.Header.Get("Content-Type") != "application/json" {
		t.Errorf("GET %s: %d %s, want 405 application/json", GitWebhookPath, get.StatusCode, get.Header.Get("Content-Type"))
	}
	// The review endpoints stay guarded.
	authz, err := srv.Client().Post(srv.URL+"/authorize", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	authz.Body.Close()
	if authz.StatusCode != http.StatusUnauthorized {
		t.Errorf("/authorize without a client certificate: %d, want 401", authz.StatusCode)
	}
	if v := counterValue(t, m, "deputy_http_requests_total", map[string]string{"endpoint": "git_webhook", "code": "200"}); v != 1 {
		t.Errorf("git_webhook requests with 200 = %v, want 1", v)
	}
}

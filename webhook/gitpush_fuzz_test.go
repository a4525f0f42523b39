package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/apps/gitpush"
	"deputy.dev/deputy/policy/v1alpha1"
)

// gitPushSeeds are payloads every parser is fed: the fixtures, edge cases of
// the documented formats, and garbage.
func gitPushSeeds(f *testing.F) [][]byte {
	f.Helper()
	var seeds [][]byte
	for _, name := range []string{"github-push.json", "gitlab-push-hook.json", "gitlab-tag-push-hook.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	for _, s := range []string{
		"", "null", "{}", "[]", "{", `"x"`, "0",
		`{"ref":"refs/heads/main","repository":{"html_url":"https://github.com/a/b","default_branch":"main"}}`,
		`{"ref":"refs/tags/v1","after":"0000000000000000000000000000000000000000","repository":{"ssh_url":"git@github.com:a/b.git"}}`,
		`{"ref":"refs/heads/","deleted":true,"repository":{"clone_url":"https://github.com/a/b.git"}}`,
		`{"ref":"refs/pull/1/head","project":{"web_url":"http://example.com/a/b","default_branch":"main"}}`,
		`{"ref":"refs/heads/main","project":{"git_ssh_url":"git@[::1]:a/b.git"},"repository":{"homepage":"file:///srv/x"}}`,
		`{"ref":"refs/heads/main","repository":{"html_url":"https://github.com/%zz"}}`,
		`{"Ref":"refs/heads/main","ref":"refs/heads/dev","repository":{"html_url":"https://github.com/a/b"}}`,
		"repoURL=https%3A%2F%2Fgithub.com%2Fa%2Fb&revision=main",
		"repoURL=git@github.com:a/b.git&revision=HEAD&defaultBranch=main",
		"repoURL=/srv/git/x&revision=refs/tags/v1",
		"repoURL=x&revision=main&revision=dev",
		"payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D",
		"repoURL=%zz",
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// FuzzGitPushParsers feeds the same bytes to every parser: none panics, and
// what they accept is a usable push.
func FuzzGitPushParsers(f *testing.F) {
	for _, s := range gitPushSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for name, parse := range map[string]func([]byte) (gitpush.Push, error){
			"github": parseGitHubPush, "gitlab": parseGitLabPush, "form": parseGitWebhookForm,
			"github form": func(b []byte) (gitpush.Push, error) {
				p, err := githubFormPayload(b)
				if err != nil {
					return gitpush.Push{}, err
				}
				return parseGitHubPush(p)
			},
		} {
			ev, err := parse(body)
			if err != nil {
				if err.Error() == "" {
					t.Errorf("%s: empty error", name)
				}
				continue
			}
			checkPushEvent(t, name, ev)
		}
	})
}

func checkPushEvent(t *testing.T, parser string, ev gitpush.Push) {
	t.Helper()
	if !slices.ContainsFunc(ev.RepoURLs, namesRepository) || ev.Repository == "" || !slices.Contains(ev.RepoURLs, ev.Repository) {
		t.Errorf("%s accepted a push without a usable repository: %+v", parser, ev)
	}
	if ev.Ref == "" {
		t.Errorf("%s accepted a push without a ref: %+v", parser, ev)
	}
	if ev.Deleted && ev.Commit != "" {
		t.Errorf("%s: a deletion with a commit: %+v", parser, ev)
	}
	switch ev.RefType {
	case gitpush.RefBranch:
		if ev.Ref != "HEAD" && ev.Ref != "refs/heads/"+ev.Revision {
			t.Errorf("%s: branch %q from ref %q", parser, ev.Revision, ev.Ref)
		}
	case gitpush.RefTag:
		if ev.Ref != "refs/tags/"+ev.Revision || ev.TouchedHead {
			t.Errorf("%s: tag %q from ref %q (touchedHead %v)", parser, ev.Revision, ev.Ref, ev.TouchedHead)
		}
	case gitpush.RefUnknown:
		if ev.Revision != "" && (ev.Provider != ProviderForm || ev.Revision != ev.Ref) {
			t.Errorf("%s: revision %q of unknown type from ref %q", parser, ev.Revision, ev.Ref)
		}
	default:
		t.Errorf("%s: ref type %q", parser, ev.RefType)
	}
	if ev.Provider == ProviderForm && gitpush.IsCommitSHA(ev.Revision) {
		t.Errorf("form accepted a commit SHA as revision: %+v", ev)
	}
	// A commit SHA targetRevision never matches, whatever was pushed.
	if gitpush.RevisionMatches(strings.Repeat("ab", 20), ev) {
		t.Errorf("%s: a SHA targetRevision matched %+v", parser, ev)
	}
}

// FuzzGitWebhookHandler posts arbitrary, correctly signed bodies: the answer
// is 200 or 4xx, JSON, a complete metav1.Status for errors, and only
// Applications of the pushed repository are triggered.
func FuzzGitWebhookHandler(f *testing.F) {
	for _, s := range gitPushSeeds(f) {
		for _, p := range []uint8{0, 1, 2, 3, 4} {
			f.Add(s, p)
		}
	}
	dir := f.TempDir()
	settings := GitWebhookOptions{MaxPayloadBytes: 8 << 10}
	for name, v := range map[*string]string{&settings.GitHubSecretFile: testGitHubSecret, &settings.GitLabSecretFile: testGitLabSecret, &settings.TokenFile: testFormToken} {
		p := filepath.Join(dir, strings.ReplaceAll(v, "-", ""))
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			f.Fatal(err)
		}
		*name = p
	}
	list := []*v1alpha1.Application{
		gitApp("a", "github", "https://github.com/binkkatal/sample_app", "", true),
		gitApp("a", "gitlab", "git@example.com:mike/diaspora.git", "master", true),
		gitApp("a", "tag", "http://example.com/jsmith/example", "v1.0.0", true),
		gitApp("a", "any", "https://github.com/a/b", "main", true),
		gitApp("a", "manual", "https://github.com/a/b", "main", false),
	}
	h, err := NewGitWebhookHandler(GitWebhookOptions{
		GitHubSecretFile: settings.GitHubSecretFile, GitLabSecretFile: settings.GitLabSecretFile, TokenFile: settings.TokenFile,
		MaxPayloadBytes: settings.MaxPayloadBytes,
		Applications:    func() ([]*v1alpha1.Application, error) { return list, nil },
		Trigger: func(_ context.Context, app *v1alpha1.Application, push gitpush.Push) error {
			if !push.Matches(app) || app.Spec.SyncPolicy == nil {
				panic("triggered an Application the push does not match: " + app.Name)
			}
			return nil
		},
		Log: discardLog(),
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, provider uint8) {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, GitWebhookPath, bytes.NewReader(body))
		switch provider % 5 {
		case 0:
			r.Header.Set("X-GitHub-Event", "push")
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-Hub-Signature-256", githubSignature(testGitHubSecret, body))
		case 1:
			r.Header.Set("X-GitHub-Event", "push")
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("X-Hub-Signature-256", githubSignature(testGitHubSecret, body))
		case 2:
			r.Header.Set("X-Gitlab-Event", "Push Hook")
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-Gitlab-Token", testGitLabSecret)
		case 3:
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("X-Deputy-Webhook-Token", testFormToken)
		case 4:
			// Unsigned: always 401, never read further.
			r.Header.Set("X-GitHub-Event", "push")
			r.Header.Set("Content-Type", "application/json")
		}
		got := serve(t, h, r)
		if got.code != http.StatusOK && (got.code < 400 || got.code > 499) {
			t.Fatalf("status %d for a client's body: %s", got.code, got.body)
		}
		if provider%5 == 4 && got.code != http.StatusUnauthorized {
			t.Fatalf("an unsigned delivery got %d", got.code)
		}
		if ct := got.header.Get("Content-Type"); ct != "application/json" || !json.Valid(got.body) {
			t.Fatalf("answer is not JSON (%s): %q", ct, got.body)
		}
		if got.code != http.StatusOK {
			var st metav1.Status
			if err := json.Unmarshal(got.body, &st); err != nil || st.Kind != "Status" || int(st.Code) != got.code || st.Message == "" || st.Reason == "" {
				t.Fatalf("the error answer is not a complete metav1.Status: %s", got.body)
			}
			return
		}
		var res GitWebhookResult
		if err := json.Unmarshal(got.body, &res); err != nil || res.Triggered == nil || res.Manual == nil || res.AlreadyInProgress == nil {
			t.Fatalf("the answer is not a GitWebhookResult: %s", got.body)
		}
	})
}

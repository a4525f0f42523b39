package tokenreview_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/tokenreview"
)

var apiAudiences = []string{"https://kubernetes.default.svc", "deputy"}

// hashColumn is the "sha256:<hex>" token file column for tok.
func hashColumn(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return "sha256:" + hex.EncodeToString(h[:])
}

// mustTokenSet parses a token file and indexes it.
func mustTokenSet(t testing.TB, contents string) *policy.TokenSet {
	t.Helper()
	entries, err := policy.ParseTokenFile("tokens.csv", strings.NewReader(contents))
	if err != nil {
		t.Fatalf("ParseTokenFile() error = %v", err)
	}
	set, err := policy.NewTokenSet(entries)
	if err != nil {
		t.Fatalf("NewTokenSet() error = %v", err)
	}
	return set
}

// failing is an authenticator with a real fault.
func failing(msg string) authenticator.Token {
	return authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
		return nil, false, errors.New(msg)
	})
}

// audienceAware authenticates tok as u for the audiences it serves, the way
// the OIDC/JWT authenticator does: without audiences in the context it checks
// none, else it answers only for the intersection. Any other token: unknown.
func audienceAware(tok string, serves []string, u *user.DefaultInfo) authenticator.Token {
	return authenticator.TokenFunc(func(ctx context.Context, got string) (*authenticator.Response, bool, error) {
		if got != tok {
			return nil, false, nil
		}
		want, ok := authenticator.AudiencesFrom(ctx)
		if !ok {
			return &authenticator.Response{User: u}, true, nil
		}
		auds := want.Intersect(serves)
		if len(auds) == 0 {
			return nil, false, nil
		}
		return &authenticator.Response{User: u, Audiences: auds}, true, nil
	})
}

// answering returns a fixed answer for every token.
func answering(resp *authenticator.Response, ok bool) authenticator.Token {
	return authenticator.TokenFunc(func(context.Context, string) (*authenticator.Response, bool, error) {
		return resp, ok, nil
	})
}

func TestReview(t *testing.T) {
	set := mustTokenSet(t, "alice-token,alice,uid-alice,\"dev,ops\"\n"+hashColumn("bob-token")+",bob,uid-bob\n")
	carol := &user.DefaultInfo{Name: "carol", UID: "uid-carol", Groups: []string{"oidc:dev"}, Extra: map[string][]string{"acme.io/team": {"a", "b"}}}
	carolStatus := authenticationv1.UserInfo{Username: "carol", UID: "uid-carol", Groups: []string{"oidc:dev"},
		Extra: map[string]authenticationv1.ExtraValue{"acme.io/team": {"a", "b"}}}
	alice := authenticationv1.UserInfo{Username: "alice", UID: "uid-alice", Groups: []string{"dev", "ops"}, Extra: map[string]authenticationv1.ExtraValue{}}
	bob := authenticationv1.UserInfo{Username: "bob", UID: "uid-bob", Extra: map[string]authenticationv1.ExtraValue{}}

	tests := []struct {
		name         string
		apiAudiences []string
		extra        []authenticator.Token
		spec         authenticationv1.TokenReviewSpec
		want         authenticationv1.TokenReviewStatus
		wantErr      error
	}{
		{
			name:         "a known plain token authenticates for the configured audiences",
			apiAudiences: apiAudiences,
			spec:         authenticationv1.TokenReviewSpec{Token: "alice-token"},
			want:         authenticationv1.TokenReviewStatus{Authenticated: true, User: alice, Audiences: apiAudiences},
		},
		{
			name:         "a token stored as sha256 authenticates",
			apiAudiences: apiAudiences,
			spec:         authenticationv1.TokenReviewSpec{Token: "bob-token"},
			want:         authenticationv1.TokenReviewStatus{Authenticated: true, User: bob, Audiences: apiAudiences},
		},
		{
			name:         "the sha256 column is not itself a token",
			apiAudiences: apiAudiences,
			spec:         authenticationv1.TokenReviewSpec{Token: hashColumn("bob-token")},
			want:         authenticationv1.TokenReviewStatus{},
		},
		{
			name:         "an unknown token is unauthenticated without an error",
			apiAudiences: apiAudiences,
			spec:         authenticationv1.TokenReviewSpec{Token: "mallory-token"},
			want:         authenticationv1.TokenReviewStatus{},
		},
		{
			name:         "an empty token is a bad request",
			apiAudiences: apiAudiences,
			spec:         authenticationv1.TokenReviewSpec{Audiences: []string{"deputy"}},
			wantErr:      tokenreview.ErrTokenRequired,
		},
		{
			name:         "requested audiences are intersected with the configured ones",
			apiAudiences: apiAudiences,
			spec:         authenticationv1.TokenReviewSpec{Token: "alice-token", Audiences: []string{"other", "deputy"}},
			want:         authenticationv1.TokenReviewStatus{Authenticated: true, User: alice, Audiences: []string{"deputy"}},
		},
		{
			name:         "requested audiences disjoint from the configured ones are unauthenticated without an error",
			apiAudiences: apiAudiences,
			spec:         authenticationv1.TokenReviewSpec{Token: "alice-token", Audiences: []string{"other"}},
			want:         authenticationv1.TokenReviewStatus{},
		},
		{
			name: "no configured and no requested audiences authenticate without audiences",
			spec: authenticationv1.TokenReviewSpec{Token: "alice-token"},
			want: authenticationv1.TokenReviewStatus{Authenticated: true, User: alice},
		},
		{
			name: "requested audiences with none configured are unauthenticated",
			spec: authenticationv1.TokenReviewSpec{Token: "alice-token", Audiences: []string{"deputy"}},
			want: authenticationv1.TokenReviewStatus{},
		},
		{
			name:         "a failing extra authenticator sets the error when nothing authenticates",
			apiAudiences: apiAudiences,
			extra:        []authenticator.Token{failing("oidc: provider unreachable")},
			spec:         authenticationv1.TokenReviewSpec{Token: "mallory-token"},
			want:         authenticationv1.TokenReviewStatus{Error: "oidc: provider unreachable"},
		},
		{
			name:         "a failing extra authenticator does not matter when the token file authenticates",
			apiAudiences: apiAudiences,
			extra:        []authenticator.Token{failing("oidc: provider unreachable")},
			spec:         authenticationv1.TokenReviewSpec{Token: "alice-token"},
			want:         authenticationv1.TokenReviewStatus{Authenticated: true, User: alice, Audiences: apiAudiences},
		},
		{
			name:         "a later extra authenticator that succeeds clears an earlier failure",
			apiAudiences: apiAudiences,
			extra: []authenticator.Token{
				failing("oidc: provider unreachable"),
				audienceAware("carol-token", []string{"deputy"}, carol),
			},
			spec: authenticationv1.TokenReviewSpec{Token: "carol-token"},
			want: authenticationv1.TokenReviewStatus{Authenticated: true, User: carolStatus, Audiences: []string{"deputy"}},
		},
		{
			name:         "errors of several failing authenticators are aggregated",
			apiAudiences: apiAudiences,
			extra:        []authenticator.Token{failing("first fault"), nil, failing("second fault")},
			spec:         authenticationv1.TokenReviewSpec{Token: "mallory-token"},
			want:         authenticationv1.TokenReviewStatus{Error: "[first fault, second fault]"},
		},
		{
			name:         "an audience-aware extra authenticator answers for requested audiences it serves",
			apiAudiences: apiAudiences,
			extra:        []authenticator.Token{audienceAware("carol-token", []string{"oidc-client"}, carol)},
			spec:         authenticationv1.TokenReviewSpec{Token: "carol-token", Audiences: []string{"oidc-client", "deputy"}},
			want:         authenticationv1.TokenReviewStatus{Authenticated: true, User: carolStatus, Audiences: []string{"oidc-client"}},
		},
		{
			name:         "a token file token is not valid for an extra authenticator's audience",
			apiAudiences: apiAudiences,
			extra:        []authenticator.Token{audienceAware("carol-token", []string{"oidc-client"}, carol)},
			spec:         authenticationv1.TokenReviewSpec{Token: "alice-token", Audiences: []string{"oidc-client"}},
			want:         authenticationv1.TokenReviewStatus{},
		},
		{
			name:         "an authenticator answering for no requested audience is an internal error",
			apiAudiences: apiAudiences,
			extra:        []authenticator.Token{answering(&authenticator.Response{User: carol, Audiences: []string{"elsewhere"}}, true)},
			spec:         authenticationv1.TokenReviewSpec{Token: "carol-token"},
			wantErr:      tokenreview.ErrInvalidAudiences,
		},
		{
			name:         "audiences beyond the ones under review are not reported",
			apiAudiences: apiAudiences,
			extra:        []authenticator.Token{answering(&authenticator.Response{User: carol, Audiences: []string{"elsewhere", "deputy"}}, true)},
			spec:         authenticationv1.TokenReviewSpec{Token: "carol-token"},
			want:         authenticationv1.TokenReviewStatus{Authenticated: true, User: carolStatus, Audiences: []string{"deputy"}},
		},
		{
			name:         "an authenticator claiming success without a user fails closed",
			apiAudiences: apiAudiences,
			extra:        []authenticator.Token{answering(nil, true)},
			spec:         authenticationv1.TokenReviewSpec{Token: "carol-token"},
			want:         authenticationv1.TokenReviewStatus{Error: "authenticator reported success without a user"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chain := tokenreview.NewChain(tt.apiAudiences, func() *policy.TokenSet { return set }, tt.extra...)
			got, err := tokenreview.NewReviewer(chain, tt.apiAudiences).Review(t.Context(), tt.spec)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Review() error = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Review() status mismatch (-want +got):\n%s", diff)
			}
			if strings.Contains(fmt.Sprintf("%#v", got), tt.spec.Token) && tt.spec.Token != "" {
				t.Errorf("Review() status %#v contains the token", got)
			}
		})
	}
}

func TestReviewEdges(t *testing.T) {
	set := mustTokenSet(t, "alice-token,alice,uid-alice\n")
	current := func() *policy.TokenSet { return set }

	t.Run("a reviewer without an authenticator authenticates nobody", func(t *testing.T) {
		got, err := tokenreview.NewReviewer(nil, apiAudiences).Review(t.Context(), authenticationv1.TokenReviewSpec{Token: "alice-token"})
		if err != nil || got.Authenticated || got.Error != "" {
			t.Errorf("Review() = %+v, %v; want unauthenticated without errors", got, err)
		}
	})

	t.Run("a nil reviewer still requires a token", func(t *testing.T) {
		var r *tokenreview.Reviewer
		if _, err := r.Review(t.Context(), authenticationv1.TokenReviewSpec{}); !errors.Is(err, tokenreview.ErrTokenRequired) {
			t.Errorf("Review() error = %v, want ErrTokenRequired", err)
		}
	})

	t.Run("audiences already in the caller's context are ignored", func(t *testing.T) {
		ctx := authenticator.WithAudiences(t.Context(), authenticator.Audiences{"somewhere-else"})
		r := tokenreview.NewReviewer(tokenreview.NewChain(nil, current), nil)
		got, err := r.Review(ctx, authenticationv1.TokenReviewSpec{Token: "alice-token"})
		if err != nil || !got.Authenticated || len(got.Audiences) != 0 {
			t.Errorf("Review() = %+v, %v; want authenticated without audiences", got, err)
		}
	})

	t.Run("a token set source that is nil or returns nil authenticates nobody", func(t *testing.T) {
		for _, current := range []func() *policy.TokenSet{nil, func() *policy.TokenSet { return nil }} {
			got, err := tokenreview.NewReviewer(tokenreview.NewChain(nil, current), nil).Review(t.Context(), authenticationv1.TokenReviewSpec{Token: "alice-token"})
			if err != nil || got.Authenticated || got.Error != "" {
				t.Errorf("Review() = %+v, %v; want unauthenticated without errors", got, err)
			}
		}
	})

	t.Run("the configured audiences are copied", func(t *testing.T) {
		auds := []string{"deputy"}
		r := tokenreview.NewReviewer(tokenreview.NewChain(auds, current), auds)
		auds[0] = "changed"
		got, err := r.Review(t.Context(), authenticationv1.TokenReviewSpec{Token: "alice-token"})
		if err != nil || !got.Authenticated || !cmp.Equal(got.Audiences, []string{"deputy"}) {
			t.Errorf("Review() = %+v, %v; want authenticated for [deputy]", got, err)
		}
	})
}

func TestTokenFileAuthenticatorReadsTheCurrentSet(t *testing.T) {
	var current atomic.Pointer[policy.TokenSet]
	current.Store(mustTokenSet(t, "old-token,alice,1\n"))
	r := tokenreview.NewReviewer(tokenreview.NewChain(apiAudiences, current.Load), apiAudiences)
	review := func(t *testing.T, tok string) authenticationv1.TokenReviewStatus {
		t.Helper()
		got, err := r.Review(t.Context(), authenticationv1.TokenReviewSpec{Token: tok})
		if err != nil {
			t.Fatalf("Review(%s) error = %v", tok, err)
		}
		return got
	}

	steps := []struct {
		name     string
		swap     string // token file to swap in before the step, if any
		token    string
		wantUser string // "" = unauthenticated
	}{
		{name: "the old token works before the swap", token: "old-token", wantUser: "alice"},
		{name: "the new token does not work before the swap", token: "new-token"},
		{name: "the new token works after the swap", swap: "new-token,bob,2\n", token: "new-token", wantUser: "bob"},
		{name: "the old token stops working after the swap", token: "old-token"},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if step.swap != "" {
				current.Store(mustTokenSet(t, step.swap))
			}
			got := review(t, step.token)
			if got.Authenticated != (step.wantUser != "") || got.User.Username != step.wantUser || got.Error != "" {
				t.Errorf("Review(%s) = %+v, want user %q", step.token, got, step.wantUser)
			}
		})
	}
}

// TestPackageDoesNotLog keeps the package free of logging: tokens pass through
// it, so it must have no way to write them anywhere. It reads configuration
// files (keys, CAs, the revocation list), so os is allowed for os.ReadFile
// alone.
func TestPackageDoesNotLog(t *testing.T) {
	forbidden := map[string]bool{
		"log": true, "log/slog": true, "k8s.io/klog": true, "k8s.io/klog/v2": true,
		"github.com/go-logr/logr": true, "go.uber.org/zap": true, "sigs.k8s.io/controller-runtime/pkg/log": true,
	}
	allowedOS := map[string]bool{"ReadFile": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		osName := ""
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if forbidden[path] {
				t.Errorf("%s imports %s; the tokenreview package must not log", name, path)
			}
			if path == "os" {
				osName = "os"
				if imp.Name != nil {
					osName = imp.Name.Name
				}
			}
		}
		if osName == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == osName && !allowedOS[sel.Sel.Name] {
				t.Errorf("%s: uses os.%s; the tokenreview package may only read files (os.ReadFile)", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}

func BenchmarkReviewTokenFile(b *testing.B) {
	var file strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&file, "token-%d,user-%d,uid-%d,\"group-a,group-b\"\n", i, i, i)
	}
	set := mustTokenSet(b, file.String())
	r := tokenreview.NewReviewer(tokenreview.NewChain(apiAudiences, func() *policy.TokenSet { return set }), apiAudiences)
	spec := authenticationv1.TokenReviewSpec{Token: "token-500"}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		status, err := r.Review(ctx, spec)
		if err != nil || !status.Authenticated {
			b.Fatalf("Review() = %+v, %v", status, err)
		}
	}
}

package framework

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
)

func TestGitServerServesCommitsAndRecordsCredentials(t *testing.T) {
	s, err := StartGitServer(GitServerOptions{Auth: []GitAuth{{PathPrefix: "/team-a", Username: "bot", Password: "s3cret"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	files := []GitFile{
		{Path: "app/cm.yaml", Content: "kind: ConfigMap\n"},
		{Path: "app/big.yaml", Content: "a: b\n", Padding: 1 << 20},
		{Path: "app/zeros.bin", Zeros: 3 << 20},
		{Path: "app/link.yaml", Link: "cm.yaml"},
		{Path: "top.yaml", Content: "x: y\n"},
	}
	head, err := s.Commit("/team-a/app.git", "first", files)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit("/team-a-evil/app.git", "evil", files[:1]); err != nil {
		t.Fatal(err)
	}

	clone := func(url string, auth transport.AuthMethod) (*git.Repository, error) {
		return git.CloneContext(t.Context(), memory.NewStorage(), nil, &git.CloneOptions{URL: url, Auth: auth})
	}
	if _, err := clone(s.RepoURL("/team-a/app.git"), nil); !errors.Is(err, transport.ErrAuthenticationRequired) {
		t.Fatalf("clone without credentials: %v, want authentication required", err)
	}
	repo, err := clone(s.RepoURL("/team-a/app.git"), &githttp.BasicAuth{Username: "bot", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := repo.Head()
	if err != nil || ref.Hash().String() != head {
		t.Fatalf("head %v %v, want %s", ref, err, head)
	}
	c, err := repo.CommitObject(ref.Hash())
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.File("app/big.yaml")
	if err != nil || f.Size < 1<<20-64 || f.Size > 1<<20 {
		t.Fatalf("app/big.yaml: %v size %d", err, f.Size)
	}
	if f, err := c.File("app/zeros.bin"); err != nil || f.Size != 3<<20 {
		t.Fatalf("app/zeros.bin: %v", err)
	}
	if _, err := clone(s.RepoURL("/team-a/../team-a-evil/app.git"), nil); err != nil {
		t.Fatalf("dot segments are resolved by the server: %v", err)
	}
	for _, r := range s.RequestsUnder("/team-a-evil") {
		if r.Authorization {
			t.Errorf("credentials sent to %s", r.Path)
		}
	}
	var withAuth int
	for _, r := range s.RequestsUnder("/team-a") {
		if r.User == "bot" {
			withAuth++
		}
		if !strings.HasPrefix(r.Path, "/team-a/app.git/") {
			t.Errorf("path %q", r.Path)
		}
	}
	if withAuth == 0 {
		t.Errorf("no request recorded with the credentials: %+v", s.Requests())
	}
}

func TestPeakRSSOfThisProcess(t *testing.T) {
	// The current RSS first: the peak, read after it, can only be higher
	// (read the other way round, the process may grow in between).
	cur, err := RSS(os.Getpid())
	if err != nil || cur <= 0 {
		t.Fatalf("%d %v", cur, err)
	}
	peak, err := PeakRSS(os.Getpid())
	if err != nil || peak <= 0 || cur > peak {
		t.Fatalf("rss %d peak %d %v", cur, peak, err)
	}
}

package source

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5"
)

// gitServer serves the repositories under root over smart HTTP with git's
// own http-backend (through net/http/cgi), and records each request's path
// and basic-auth user.
type gitServer struct {
	*httptest.Server
	root string

	mu       sync.Mutex
	requests []gitRequest
	// password, when set, is required (any user name).
	password string
}

type gitRequest struct {
	path, user string
	auth       bool
}

func newGitServer(t *testing.T) *gitServer {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed; the smart-HTTP test server needs git http-backend")
	}
	s := &gitServer{root: t.TempDir()}
	backend := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + s.root, "GIT_HTTP_EXPORT_ALL=1"}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, pass, ok := req.BasicAuth()
		s.mu.Lock()
		s.requests = append(s.requests, gitRequest{path: req.URL.Path, user: user, auth: ok})
		s.mu.Unlock()
		if s.password != "" && (!ok || pass != s.password) {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, req)
	}))
	t.Cleanup(s.Close)
	return s
}

// repo creates a repository served at s.URL/<name>/.git.
func (s *gitServer) repo(t *testing.T, name string) (*testRepo, string) {
	t.Helper()
	dir := filepath.Join(s.root, filepath.FromSlash(name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	return &testRepo{t: t, dir: dir, repo: repo, wt: wt}, s.URL + "/" + name + "/.git"
}

func (s *gitServer) seen() []gitRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]gitRequest(nil), s.requests...)
}

func (s *gitServer) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
}

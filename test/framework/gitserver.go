package framework

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// GitServer is a Git smart-HTTP server for tests: `git http-backend` behind
// net/http/cgi, listening on 127.0.0.1 only and serving the bare
// repositories under Root (made by the test with InitRepo and Commit). Paths
// can require basic-auth credentials (GitAuth), and every request is
// recorded with whether it carried an Authorization header, so that a test
// can assert that a credential was never sent somewhere. Like the web
// servers that usually front Git, the server resolves dot segments
// ("/a/../b" is "/b") before it authorizes and routes a request.
type GitServer struct {
	// URL is http://127.0.0.1:PORT.
	URL string
	// Root holds the repositories: a request for /team/app.git/info/refs
	// is served from Root/team/app.git.
	Root string

	git      string
	ln       net.Listener
	srv      *http.Server
	auth     []GitAuth
	hang     []string
	ownsRoot bool
	closing  chan struct{}
	done     chan struct{}

	mu       sync.Mutex
	requests []GitRequest
}

// GitAuth protects the repositories under PathPrefix ("/team-a" covers
// "/team-a" and everything below "/team-a/", never "/team-a-evil"): a
// request without exactly these basic-auth credentials gets 401.
type GitAuth struct {
	PathPrefix, Username, Password string
}

// GitServerOptions configure StartGitServer.
type GitServerOptions struct {
	// Addr is the 127.0.0.1:PORT to listen on; default a free port.
	Addr string
	// Root is the directory of the repositories; default a new temporary
	// directory that Close removes.
	Root string
	// Auth lists the protected path prefixes.
	Auth []GitAuth
	// Hang lists path prefixes whose requests are held open (no response)
	// until the client goes away or the server closes: a Git server that
	// never answers.
	Hang []string
}

// GitRequest is one request the server received.
type GitRequest struct {
	Method string
	// Path is the decoded path with dot segments resolved (what the server
	// routed); RawPath is the request target as sent.
	Path, RawPath string
	// Authorization says whether an Authorization header was received;
	// User is the basic-auth user name it carried ("" if none or not basic).
	Authorization  bool
	User, Password string
	// Status is the response status (0 while a hanging request is open).
	Status int
}

// StartGitServer starts the server. Stop it with Close.
func StartGitServer(o GitServerOptions) (*GitServer, error) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("the test Git server needs git: %w", err)
	}
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
		return nil, fmt.Errorf("the test Git server listens on 127.0.0.1 only, not %q", addr)
	}
	s := &GitServer{Root: o.Root, git: gitBin, auth: o.Auth, hang: o.Hang, closing: make(chan struct{}), done: make(chan struct{})}
	if s.Root == "" {
		if s.Root, err = os.MkdirTemp("", "e2e-git-"); err != nil {
			return nil, err
		}
		s.ownsRoot = true
	}
	if s.ln, err = net.Listen("tcp", addr); err != nil {
		s.cleanRoot()
		return nil, err
	}
	s.URL = "http://" + s.ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 30 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(s.ln)
	}()
	return s, nil
}

// Close stops the server (releasing hanging requests) and removes Root if
// the server created it.
func (s *GitServer) Close() error {
	select {
	case <-s.closing:
		return nil
	default:
	}
	close(s.closing)
	err := s.srv.Close()
	<-s.done
	s.cleanRoot()
	return err
}

func (s *GitServer) cleanRoot() {
	if s.ownsRoot {
		_ = os.RemoveAll(s.Root)
	}
}

// Port is the port the server listens on.
func (s *GitServer) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Requests returns every request received so far.
func (s *GitServer) Requests() []GitRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]GitRequest(nil), s.requests...)
}

// RequestsUnder returns the requests whose (resolved) path is prefix or
// below it on a '/' boundary.
func (s *GitServer) RequestsUnder(prefix string) []GitRequest {
	var out []GitRequest
	for _, r := range s.Requests() {
		if underPrefix(r.Path, prefix) {
			out = append(out, r)
		}
	}
	return out
}

func underPrefix(p, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return prefix == "" || p == prefix || strings.HasPrefix(p, prefix+"/")
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (s *GitServer) serve(w http.ResponseWriter, r *http.Request) {
	clean := path.Clean("/" + r.URL.Path)
	user, password, _ := r.BasicAuth()
	rec := GitRequest{Method: r.Method, Path: clean, RawPath: r.RequestURI, Authorization: r.Header.Get("Authorization") != "", User: user, Password: password}
	s.mu.Lock()
	idx := len(s.requests)
	s.requests = append(s.requests, rec)
	s.mu.Unlock()
	sw := &statusRecorder{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		s.requests[idx].Status = sw.status
		s.mu.Unlock()
	}()

	for _, h := range s.hang {
		if underPrefix(clean, h) {
			select {
			case <-r.Context().Done():
			case <-s.closing:
			}
			return
		}
	}
	if a := s.authFor(clean); a != nil {
		u, p, ok := r.BasicAuth()
		if !ok || u != a.Username || p != a.Password {
			sw.Header().Set("WWW-Authenticate", `Basic realm="e2e git"`)
			http.Error(sw, "authentication required", http.StatusUnauthorized)
			return
		}
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = clean, ""
	h := &cgi.Handler{
		Path: s.git,
		Args: []string{"http-backend"},
		Dir:  s.Root,
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.Root,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"HOME=" + s.Root,
			"PATH=" + os.Getenv("PATH"),
		},
	}
	h.ServeHTTP(sw, r2)
}

// authFor returns the most specific protection of p, or nil.
func (s *GitServer) authFor(p string) *GitAuth {
	var best *GitAuth
	for i := range s.auth {
		a := &s.auth[i]
		if underPrefix(p, a.PathPrefix) && (best == nil || len(a.PathPrefix) > len(best.PathPrefix)) {
			best = a
		}
	}
	return best
}

// RepoURL is the URL of the repository at repoPath ("/team/app.git").
func (s *GitServer) RepoURL(repoPath string) string {
	return s.URL + "/" + strings.TrimPrefix(repoPath, "/")
}

// RepoDir is the directory of the repository at repoPath.
func (s *GitServer) RepoDir(repoPath string) string {
	return filepath.Join(s.Root, filepath.FromSlash(strings.TrimPrefix(repoPath, "/")))
}

// InitRepo creates the bare repository repoPath (branch main) unless it
// exists, and returns its directory.
func (s *GitServer) InitRepo(repoPath string) (string, error) {
	dir := s.RepoDir(repoPath)
	return dir, InitBareRepo(dir)
}

// InitBareRepo creates the bare repository dir (branch main) unless it
// exists.
func InitBareRepo(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, err := runGit(dir, nil, "init", "--bare", "--quiet", "--initial-branch=main")
	return err
}

// GitFile is one file of a commit. Exactly one of Content (with optional
// Padding), Zeros and Link describes it.
type GitFile struct {
	Path string
	// Content is the file's text. With Padding > 0 it is preceded by YAML
	// comment lines making the file about Padding bytes long (valid YAML
	// that compresses to almost nothing: a "zip bomb" of manifests).
	Content string
	Padding int64
	// Zeros > 0 makes a file of that many zero bytes (never held in memory).
	Zeros int64
	// Link makes the file a symbolic link to this target.
	Link string
}

// Commit records files as the complete tree of a new commit on branch main
// of repoPath (created if needed), with the previous head as parent, and
// returns the commit's SHA. Identical files share one blob, so a tree of
// many copies of a large file stays small.
func (s *GitServer) Commit(repoPath, message string, files []GitFile) (string, error) {
	return CommitFiles(s.RepoDir(repoPath), message, files)
}

// CommitFiles is GitServer.Commit for the bare repository dir (created if
// needed), wherever it is.
func CommitFiles(dir, message string, files []GitFile) (string, error) {
	if err := InitBareRepo(dir); err != nil {
		return "", err
	}
	var err error
	blobs := map[string]string{}
	type entry struct{ mode, kind, sha, name string }
	trees := map[string][]entry{"": nil}
	for _, f := range files {
		p := strings.Trim(path.Clean("/"+f.Path), "/")
		if p == "" || p == "." {
			return "", fmt.Errorf("file path %q", f.Path)
		}
		key := fmt.Sprintf("%d\x00%d\x00%s\x00%s", f.Padding, f.Zeros, f.Link, f.Content)
		sha, ok := blobs[key]
		if !ok {
			if sha, err = writeBlob(dir, f); err != nil {
				return "", fmt.Errorf("%s: %w", f.Path, err)
			}
			blobs[key] = sha
		}
		mode := "100644"
		if f.Link != "" {
			mode = "120000"
		}
		parent, name := path.Split(p)
		parent = strings.TrimSuffix(parent, "/")
		trees[parent] = append(trees[parent], entry{mode, "blob", sha, name})
		// Make sure every ancestor directory exists as a tree.
		for d := parent; d != ""; {
			up, _ := path.Split(d)
			up = strings.TrimSuffix(up, "/")
			if _, ok := trees[d]; !ok {
				trees[d] = nil
			}
			d = up
		}
	}
	// Build trees deepest first.
	dirs := make([]string, 0, len(trees))
	for d := range trees {
		dirs = append(dirs, d)
	}
	sort.Slice(dirs, func(i, j int) bool {
		di, dj := strings.Count(dirs[i], "/"), strings.Count(dirs[j], "/")
		if dirs[i] == "" {
			di = -1
		}
		if dirs[j] == "" {
			dj = -1
		}
		if di != dj {
			return di > dj
		}
		return dirs[i] < dirs[j]
	})
	treeSHA := map[string]string{}
	for _, d := range dirs {
		var in bytes.Buffer
		for _, e := range trees[d] {
			fmt.Fprintf(&in, "%s %s %s\t%s\n", e.mode, e.kind, e.sha, e.name)
		}
		for sub, sha := range treeSHA {
			up, name := path.Split(sub)
			if strings.TrimSuffix(up, "/") == d && sub != "" {
				fmt.Fprintf(&in, "040000 tree %s\t%s\n", sha, name)
			}
		}
		out, err := runGit(dir, in.Bytes(), "mktree")
		if err != nil {
			return "", err
		}
		treeSHA[d] = strings.TrimSpace(out)
	}
	args := []string{"commit-tree", treeSHA[""], "-m", message}
	if head, err := runGit(dir, nil, "rev-parse", "--verify", "--quiet", "refs/heads/main"); err == nil && strings.TrimSpace(head) != "" {
		args = append(args, "-p", strings.TrimSpace(head))
	}
	out, err := runGit(dir, nil, args...)
	if err != nil {
		return "", err
	}
	sha := strings.TrimSpace(out)
	if _, err := runGit(dir, nil, "update-ref", "refs/heads/main", sha); err != nil {
		return "", err
	}
	return sha, nil
}

// writeBlob stores f's content as a blob (through a temporary file, so that
// large files are streamed by git) and returns its SHA.
func writeBlob(dir string, f GitFile) (string, error) {
	tmp, err := os.CreateTemp("", "e2e-blob-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	switch {
	case f.Link != "":
		_, err = tmp.WriteString(f.Link)
	case f.Zeros > 0:
		err = tmp.Truncate(f.Zeros)
	default:
		bw := bufio.NewWriterSize(tmp, 1<<20)
		if f.Padding > 0 {
			line := "# " + strings.Repeat("padding ", 7) + "\n" // 59 bytes
			for n := int64(0); n+int64(len(line)) <= f.Padding-int64(len(f.Content)); n += int64(len(line)) {
				if _, err = bw.WriteString(line); err != nil {
					break
				}
			}
		}
		if err == nil {
			_, err = bw.WriteString(f.Content)
		}
		if err == nil {
			err = bw.Flush()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	out, err := runGit(dir, nil, "hash-object", "-w", "--no-filters", tmp.Name())
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

func runGit(gitDir string, stdin []byte, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"--git-dir=" + gitDir}, args...)...)
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+gitDir,
		"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@example.com",
		"GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.com")
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(args) > 0 && args[0] == "rev-parse" {
			return "", err
		}
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

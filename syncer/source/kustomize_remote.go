package source

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/kustomize/kyaml/filesys"

	"deputy.dev/deputy/syncer/source/localrepo"
)

// This file is what sync.kustomize.remoteResources turns on. kustomize's
// loader (sigs.k8s.io/kustomize/api internal/loader) gives deputy no seam:
// it fetches http(s) files with `&http.Client{}` (so http.DefaultTransport,
// no timeout, io.ReadAll of the body) and clones Git bases by running the
// git binary into os.MkdirTemp("", "kustomize-") directories (with its own
// per-clone timeout, 27s unless the URL's ?timeout= says otherwise, and
// submodules unless ?submodules=false). What deputy can bound, it bounds
// from outside, process-wide in the render worker that runs the build
// (configureKustomizeRemote; off, the same wrapper refuses every request and
// git may use no protocol):
//   - http.DefaultTransport is wrapped: each request without a User-Agent
//     (kustomize's; client-go, which may send through the default transport,
//     always names itself) gets RemoteTimeout, and each response body is cut
//     at Limits.MaxFileBytes (an error, not a truncation). The Git fetches
//     have their own client (transport.go).
//   - git's environment: only the http and https protocols
//     (GIT_ALLOW_PROTOCOL: no file://, ssh or ext, for the clone and its
//     submodules), no prompts, no system or global configuration (so no
//     credential helpers of the host), and a low-speed abort after
//     RemoteTimeout.
//   - clones are read through gitFS's disk overlay (cloneDirs) with the
//     render's budget, confined to the clone by os.Root.
// What it cannot bound: which hosts are reached (any URL deputy's Pod can
// reach, cluster-internal and metadata endpoints included), the size of a
// clone on disk, the time of a clone whose URL sets a long ?timeout= while
// data keeps flowing, and requests an abandoned build still makes after the
// operation ended (each is bounded by RemoteTimeout).

// remoteLoadSettings are the bounds of kustomize's remote loads; enabled
// false refuses every one.
type remoteLoadSettings struct {
	enabled  bool
	timeout  time.Duration
	maxBytes int64
}

var (
	remoteSettings    atomic.Pointer[remoteLoadSettings]
	remoteInstallOnce sync.Once
)

// gitNoProtocol is the only protocol git may use while remote loading is
// off: one that does not exist, so the git binary kustomize runs for a
// remote base fetches nothing.
const gitNoProtocol = "deputy-remote-resources-off"

// configureKustomizeRemote sets what kustomize's remote loads may do,
// process-wide: a render worker calls it with its request's settings before
// it renders (kustomize never runs in deputy's own process). Off,
// it is the backstop behind the reference check of kustomizeBuild: should
// a remote reference slip past that check, kustomize's HTTP request is
// refused before it is sent (naming sync.kustomize.remoteResources) and
// git may use no protocol at all. On, it installs the bounds described
// above.
func configureKustomizeRemote(enabled bool, timeout time.Duration, maxBytes int64) {
	if timeout <= 0 {
		timeout = DefaultKustomizeRemoteTimeout
	}
	remoteSettings.Store(&remoteLoadSettings{enabled: enabled, timeout: timeout, maxBytes: maxBytes})
	remoteInstallOnce.Do(func() {
		http.DefaultTransport = &boundedTransport{base: http.DefaultTransport}
	})
	secs := max(int(timeout/time.Second), 1)
	allow := gitNoProtocol
	if enabled {
		allow = "https:http"
	}
	for k, v := range map[string]string{
		"GIT_ALLOW_PROTOCOL":       allow,
		"GIT_TERMINAL_PROMPT":      "0",
		"GIT_CONFIG_NOSYSTEM":      "1",
		"GIT_CONFIG_GLOBAL":        os.DevNull,
		"GIT_HTTP_LOW_SPEED_LIMIT": "1000",
		"GIT_HTTP_LOW_SPEED_TIME":  strconv.Itoa(secs),
	} {
		_ = os.Setenv(k, v)
	}
}

// boundedTransport bounds each request's time and each response's size.
type boundedTransport struct{ base http.RoundTripper }

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// client-go sends through http.DefaultTransport too (a rest.Config
	// without TLS settings), always with a User-Agent; kustomize's loader
	// sends none (http.Client{}.Get). Only requests without one are
	// kustomize's, and only those are bounded or refused.
	if req.Header.Get("User-Agent") != "" {
		return t.base.RoundTrip(req)
	}
	s := remoteSettings.Load()
	if s == nil || !s.enabled {
		return nil, fmt.Errorf("refused to fetch %s: kustomize remote loading is off (%s)", req.URL.Redacted(), FieldKustomizeRemoteResources)
	}
	ctx, cancel := context.WithTimeout(req.Context(), s.timeout)
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%w (requests of kustomize's remote loading time out after %s: sync.kustomize.remoteTimeout)", err, s.timeout)
	}
	resp.Body = &boundedBody{body: resp.Body, left: s.maxBytes, limit: s.maxBytes, url: req.URL.Redacted(), cancel: cancel}
	return resp, nil
}

type boundedBody struct {
	body   io.ReadCloser
	left   int64
	limit  int64
	url    string
	cancel context.CancelFunc
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than the limit tells a body of exactly the limit
		// from a longer one.
		var one [1]byte
		if n, _ := b.body.Read(one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, &LimitError{Field: FieldMaxFileBytes, What: fmt.Sprintf("the remote file %s", b.url), Limit: bytesString(b.limit)}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error {
	defer b.cancel()
	return b.body.Close()
}

// cloneDirs serves, read-only, the directories kustomize clones Git bases
// into: <temp dir>/kustomize-*.
type cloneDirs struct{ tmp string }

// kustomizeCloneDirs is the overlay for the system temporary directory
// (symbolic links resolved, as kustomize's filesys.NewTmpConfirmedDir does).
func kustomizeCloneDirs() *cloneDirs {
	tmp := os.TempDir()
	if r, err := filepath.EvalSymlinks(tmp); err == nil {
		tmp = r
	}
	return &cloneDirs{tmp: filepath.Clean(tmp)}
}

// split returns the clone directory holding p and p relative to it.
func (c *cloneDirs) split(p string) (cloneDir, rel string, ok bool) {
	p = filepath.Clean(p)
	rest, found := strings.CutPrefix(p, c.tmp+string(filepath.Separator))
	if !found {
		return "", "", false
	}
	first, after, _ := strings.Cut(rest, string(filepath.Separator))
	if !strings.HasPrefix(first, "kustomize-") {
		return "", "", false
	}
	return filepath.Join(c.tmp, first), cmp.Or(after, "."), true
}

// isClone reports whether p is a clone directory itself.
func (c *cloneDirs) isClone(p string) bool {
	_, rel, ok := c.split(p)
	return ok && rel == "."
}

func (c *cloneDirs) root(p string) (*os.Root, string, error) {
	dir, rel, ok := c.split(p)
	if !ok {
		return nil, "", fmt.Errorf("%s: %w (outside the repository)", p, fs.ErrNotExist)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", err
	}
	return r, rel, nil
}

func (c *cloneDirs) stat(p string) (fs.FileInfo, error) {
	r, rel, err := c.root(p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Stat(rel)
}

func (c *cloneDirs) readFile(p string, b *renderBudget) ([]byte, error) {
	r, rel, err := c.root(p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory", p)
	}
	if err := b.file(p, fi.Size()); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(f, fi.Size()))
}

func (c *cloneDirs) readDir(p string) ([]string, error) {
	r, rel, err := c.root(p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// cleanedAbs is filesys' CleanedAbs inside a clone: symbolic links resolved,
// and the result must stay inside the clone.
func (c *cloneDirs) cleanedAbs(p string) (filesys.ConfirmedDir, string, error) {
	dir, _, ok := c.split(p)
	if !ok {
		return "", "", fmt.Errorf("'%s': %w (outside the repository)", p, fs.ErrNotExist)
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return "", "", err
	}
	if !localrepo.Within(real, dir) {
		return "", "", fmt.Errorf("'%s' resolves to %s, outside the clone %s", p, real, dir)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", "", err
	}
	if fi.IsDir() {
		return filesys.ConfirmedDir(real), "", nil
	}
	return filesys.ConfirmedDir(filepath.Dir(real)), filepath.Base(real), nil
}

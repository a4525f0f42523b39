package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"deputy.dev/deputy/internal/secretfile"
	"deputy.dev/deputy/syncer/source/localrepo"
)

// RepoCredential holds the HTTPS credentials of the repositories URL
// covers: URL's scheme, host and port must equal the repository URL's
// (default ports made explicit, host case-insensitive), and the repository's
// path must be URL's path or below it on a '/' boundary
// ("https://git.example.com/team-a" covers ".../team-a/app.git", never
// ".../team-a-evil/app.git"); the longest matching path wins. The username
// and password are read on every fetch, from files (a mounted Secret,
// rotated in place) or from a Secret through Options.Secrets, never
// from the Application.
type RepoCredential struct {
	// URL is a repository URL or a prefix of one: "https://git.example.com/team/".
	URL string
	// UsernameFile and PasswordFile are files holding the username and the
	// password (or token); a trailing newline is ignored.
	UsernameFile, PasswordFile string
	// Secret names a Secret holding both instead of the files.
	Secret *SecretRef
}

// SecretRef names a Secret and the keys of a RepoCredential in it.
type SecretRef struct {
	Namespace, Name string
	// UsernameKey and PasswordKey default to "username" and "password" (the
	// keys of Argo CD's repository Secrets).
	UsernameKey, PasswordKey string
}

// SecretGetter returns a Secret's data. It is called with deputy's own
// identity, never an impersonated one: repository credentials are deputy's
// business, not the synced application's.
type SecretGetter func(ctx context.Context, namespace, name string) (map[string][]byte, error)

// SecretsFromClient reads Secrets through a clientset.
func SecretsFromClient(c kubernetes.Interface) SecretGetter {
	return func(ctx context.Context, namespace, name string) (map[string][]byte, error) {
		s, err := c.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return s.Data, nil
	}
}

// openedRepo is a repository ready to read; release must be called once the
// objects needed are read (it unlocks a cached clone against concurrent
// fetches).
type openedRepo struct {
	repo    *git.Repository
	release func()
	// where is where the repository is on disk, for a render worker to
	// open it again (while release is not called, no fetch changes it).
	where workerRepo
}

// repoLocation classifies a repoURL: a local repository (file:// URL or
// absolute path; relative paths are refused) or an http(s) URL that passes
// checkRemoteURL. Errors name spec.source.repoURL and the fix.
func repoLocation(repoURL string) (local string, remote *url.URL, err error) {
	if repoURL == "" {
		return "", nil, errors.New("spec.source.repoURL is empty: set it to an https:// URL")
	}
	if local, err = localrepo.Path(repoURL); err != nil || local != "" {
		return local, nil, err
	}
	u, err := url.Parse(repoURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return "", nil, fmt.Errorf("spec.source.repoURL %q is not supported by deputy: use https:// (credentials come from deputy's configuration)", redactRaw(repoURL))
	}
	if err := checkRemoteURL(u, repoURL); err != nil {
		return "", nil, err
	}
	return "", u, nil
}

// redactRaw removes what may be user info ("user:password@") from a URL
// that does not parse, so that an error never repeats a password.
func redactRaw(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority, path, hasPath := strings.Cut(rest, "/")
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		authority = "REDACTED@" + authority[i+1:]
	}
	if hasPath {
		return scheme + "://" + authority + "/" + path
	}
	return scheme + "://" + authority
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// open returns the repository behind repoURL: a local one (only under
// sync.localRepositories, every file access confined there), or the mirror
// of a remote one, fetched now from exactly repoURL with the credentials
// that cover repoURL, within the fetch limits.
func (c *Cache) open(ctx context.Context, repoURL string) (*openedRepo, error) {
	local, remote, err := repoLocation(repoURL)
	if err != nil {
		return nil, err
	}
	if remote == nil {
		root, err := localrepo.Root(c.local, local, repoURL)
		if err != nil {
			return nil, err
		}
		repo, err := localrepo.Open(root, local, repoURL)
		if err != nil {
			return nil, err
		}
		return &openedRepo{repo: repo, release: func() {}, where: workerRepo{LocalRoot: root, LocalPath: local, URL: repoURL}}, nil
	}

	auth, err := c.auth(ctx, repoURL)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.dir, "repos", mirrorKey(repoURL))
	lock := c.lock(dir)
	lock.Lock()
	repo, err := fetch(ctx, dir, repoURL, auth, c.limits)
	if err != nil {
		lock.Unlock()
		return nil, err
	}
	return &openedRepo{repo: repo, release: lock.Unlock, where: workerRepo{Mirror: dir, URL: repoURL}}, nil
}

func (c *Cache) lock(key string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.locks == nil {
		c.locks = map[string]*sync.Mutex{}
	}
	l, ok := c.locks[key]
	if !ok {
		l = &sync.Mutex{}
		c.locks[key] = l
	}
	return l
}

// fetch updates the bare mirror in dir (cloning it the first time, or again
// when the cached copy cannot be opened or fetched into). The fetch always
// goes to repoURL (FetchOptions.RemoteURL), never to the URL the mirror
// recorded, and runs within a fetchBudget (see transport.go): a limit it
// exceeds is returned as a *LimitError.
func fetch(ctx context.Context, dir, repoURL string, auth transport.AuthMethod, limits Limits) (*git.Repository, error) {
	installGitTransport()
	budget := newFetchBudget(limits)
	ctx = withFetchBudget(ctx, budget)
	fail := func(what string, err error) error {
		if lerr := budget.err(); lerr != nil {
			return fmt.Errorf("failed to %s %s: %w", what, repoURL, lerr)
		}
		return fmt.Errorf("failed to %s %s: %w", what, repoURL, err)
	}
	if repo, err := git.PlainOpen(dir); err == nil {
		err = repo.FetchContext(ctx, &git.FetchOptions{RemoteName: git.DefaultRemoteName, RemoteURL: repoURL, Auth: auth, Force: true, Prune: true,
			RefSpecs: []config.RefSpec{"+refs/*:refs/*"}})
		if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
			return repo, nil
		}
		if ctx.Err() != nil || budget.err() != nil || errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed) ||
			errors.Is(err, transport.ErrRepositoryNotFound) {
			return nil, fail("fetch", err)
		}
		// Anything else may be a damaged cache: start over below.
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("failed to reset the repository cache %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("failed to create the repository cache: %w", err)
	}
	repo, err := git.PlainCloneContext(ctx, dir, true, &git.CloneOptions{URL: repoURL, Auth: auth, Mirror: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fail("clone", err)
	}
	return repo, nil
}

// auth returns the basic-auth credentials of the credential that covers
// repoURL (matchCredential), or nil. Credentials are never sent over plain
// http except to loopback.
func (c *Cache) auth(ctx context.Context, repoURL string) (transport.AuthMethod, error) {
	best := matchCredential(c.creds, repoURL)
	if best < 0 {
		return nil, nil
	}
	cr := c.creds[best]
	if u, err := url.Parse(repoURL); err == nil && u.Scheme == "http" && !loopback(u.Hostname()) {
		return nil, fmt.Errorf("refusing to send the credentials configured for %s over plain http to %s: use https", cr.URL, u.Host)
	}
	var user, pass string
	switch {
	case cr.Secret != nil:
		if c.secrets == nil {
			return nil, fmt.Errorf("repository credential for %s names Secret %s/%s, but the cache has no Secret reader (Options.Secrets)", cr.URL, cr.Secret.Namespace, cr.Secret.Name)
		}
		data, err := c.secrets(ctx, cr.Secret.Namespace, cr.Secret.Name)
		if err != nil {
			return nil, fmt.Errorf("failed to read the repository credential Secret %s/%s: %w", cr.Secret.Namespace, cr.Secret.Name, err)
		}
		uk, pk := cmp.Or(cr.Secret.UsernameKey, "username"), cmp.Or(cr.Secret.PasswordKey, "password")
		u, okU := data[uk]
		p, okP := data[pk]
		if !okU || !okP {
			return nil, fmt.Errorf("repository credential Secret %s/%s lacks key %q or %q", cr.Secret.Namespace, cr.Secret.Name, uk, pk)
		}
		user, pass = string(u), string(p)
	default:
		u, err := readSecretFile(cr.UsernameFile)
		if err != nil {
			return nil, fmt.Errorf("repository credential for %s: %w", cr.URL, err)
		}
		p, err := readSecretFile(cr.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("repository credential for %s: %w", cr.URL, err)
		}
		user, pass = u, p
	}
	return &githttp.BasicAuth{Username: user, Password: pass}, nil
}

// maxCredentialFileBytes bounds a usernameFile or passwordFile: a
// credential, not a document.
const maxCredentialFileBytes = 64 << 10

func readSecretFile(path string) (string, error) {
	if path == "" {
		return "", errors.New("usernameFile and passwordFile (or a Secret) are required")
	}
	b, err := secretfile.Read(path, maxCredentialFileBytes)
	if err != nil {
		return "", fmt.Errorf("failed to read %s: %w", path, err)
	}
	// Only the line break an editor or echo leaves goes: a password may
	// start or end with other white space.
	return strings.TrimRight(string(b), "\r\n"), nil
}

// loopback reports whether host is this machine (plain http is acceptable
// there, e.g. a local Git server in tests).
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

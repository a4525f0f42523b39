package localrepo

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
)

// Field is the configuration field that allows local repositories;
// refusals name it (source.Field).
const Field = "sync.localRepositories"

// maxGitPointerBytes bounds a .git file (gitdir: ...) or a commondir file:
// each holds one path.
const maxGitPointerBytes = 4096

// Path returns the cleaned absolute path a local repository URL names
// (file:///path, file://localhost/path or /path), "" when repoURL is not a
// local repository URL. Relative paths are an error: they would depend on
// deputy's working directory.
func Path(repoURL string) (string, error) {
	switch {
	case strings.HasPrefix(strings.ToLower(repoURL), "file:"): // schemes are case-insensitive (RFC 3986)
		u, err := url.Parse(repoURL)
		if err != nil {
			return "", fmt.Errorf("spec.source.repoURL %q is not a valid file:// URL (a local repository, see %s): %w", repoURL, Field, err)
		}
		if u.Host != "" && !strings.EqualFold(u.Host, "localhost") {
			return "", fmt.Errorf("spec.source.repoURL %q names host %q: file:// URLs must be local (file:///path), and local repositories are opened only under %s", repoURL, u.Host, Field)
		}
		if u.RawQuery != "" || u.Fragment != "" || !filepath.IsAbs(filepath.FromSlash(u.Path)) {
			return "", fmt.Errorf("spec.source.repoURL %q is not an absolute file:///path URL (local repositories are opened only under %s)", repoURL, Field)
		}
		return filepath.Clean(filepath.FromSlash(u.Path)), nil
	case strings.HasPrefix(repoURL, "./") || strings.HasPrefix(repoURL, "../") || repoURL == "." || repoURL == "..":
		return "", fmt.Errorf("spec.source.repoURL %q is a relative path: deputy never opens relative paths; use an https:// URL (or an absolute path under %s, if the operator allows local repositories)", repoURL, Field)
	case filepath.IsAbs(repoURL):
		return filepath.Clean(repoURL), nil
	}
	return "", nil
}

// Root returns the directory of allowed that contains path (the longest
// one), or an error naming sync.localRepositories.
func Root(allowed []string, path, repoURL string) (string, error) {
	if len(allowed) == 0 {
		return "", fmt.Errorf("spec.source.repoURL %q is a local repository, and local repositories are off: use an https:// URL, or ask the operator to list a directory holding it in %s", repoURL, Field)
	}
	best := ""
	for _, dir := range allowed {
		if (path == dir || strings.HasPrefix(path, dir+string(filepath.Separator)) || dir == string(filepath.Separator)) && len(dir) > len(best) {
			best = dir
		}
	}
	if best == "" {
		return "", fmt.Errorf("spec.source.repoURL %q is not under a directory of %s (%s): use an https:// URL or a repository under one of them", repoURL, Field, strings.Join(allowed, ", "))
	}
	return best, nil
}

// Open opens the repository at path (inside the allowed directory
// root) so that every file go-git reads stays inside root: the filesystems
// are go-billy's BoundOS (paths are joined with
// github.com/cyphar/filepath-securejoin, so symbolic links and absolute
// paths resolve as if root were "/"), and the pointers a repository may hold
// (a .git file's "gitdir:", "commondir", objects/info/alternates) are
// resolved through the same bound filesystem. A path that escapes root is
// refused with an error naming sync.localRepositories, or simply does not
// exist inside root.
//
// go-git's PlainOpen is not used: it opens whatever these pointers name with
// an unbound osfs.
func Open(root, path, repoURL string) (*git.Repository, error) {
	refuse := func(what string) error {
		return fmt.Errorf("spec.source.repoURL %q: %s, outside the directory %s allowed by %s", repoURL, what, root, Field)
	}
	// BoundOS confines every access below; this check only gives a clear
	// message for a repository directory that is a link leaving root.
	if real, err := filepath.EvalSymlinks(path); err == nil {
		realRoot, rerr := filepath.EvalSymlinks(root)
		if rerr == nil && !Within(real, realRoot) {
			return nil, refuse(fmt.Sprintf("the path resolves (through a symbolic link) to %s", real))
		}
	}
	rootFS := osfs.New(root, osfs.WithBoundOS())
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return nil, refuse("the path")
	}
	repoFS, err := rootFS.Chroot(rel)
	if err != nil {
		return nil, fmt.Errorf("failed to open the Git repository at %s: %w", path, err)
	}

	var dot billy.Filesystem
	switch fi, err := repoFS.Lstat(git.GitDirName); {
	case err == nil && fi.IsDir():
		if dot, err = repoFS.Chroot(git.GitDirName); err != nil {
			return nil, fmt.Errorf("failed to open the Git repository at %s: %w", path, err)
		}
	case err == nil:
		// A .git file: "gitdir: <path>" (a linked worktree or a submodule).
		target, err := readPointer(repoFS, git.GitDirName, "gitdir: ")
		if err != nil {
			return nil, fmt.Errorf("failed to open the Git repository at %s: %w", path, err)
		}
		if dot, err = boundChroot(rootFS, root, repoFS.Root(), target); err != nil {
			return nil, refuse(fmt.Sprintf("its .git file points to %s", target))
		}
	case errors.Is(err, os.ErrNotExist):
		dot = repoFS // a bare repository
	default:
		return nil, fmt.Errorf("failed to open the Git repository at %s: %w", path, err)
	}
	if _, err := dot.Stat("HEAD"); err != nil {
		return nil, fmt.Errorf("failed to open the Git repository at %s: it is not a Git repository (no HEAD)", path)
	}

	var common billy.Filesystem
	if _, err := dot.Lstat("commondir"); err == nil {
		target, err := readPointer(dot, "commondir", "")
		if err != nil {
			return nil, fmt.Errorf("failed to open the Git repository at %s: %w", path, err)
		}
		if common, err = boundChroot(rootFS, root, dot.Root(), target); err != nil {
			return nil, refuse(fmt.Sprintf("its commondir points to %s", target))
		}
	}
	repoStorage := filesystem.NewStorageWithOptions(dotgit.NewRepositoryFilesystem(dot, common), cache.NewObjectLRUDefault(),
		filesystem.Options{AlternatesFS: alternatesFS{Filesystem: rootFS, root: root}})
	repo, err := git.Open(repoStorage, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to open the Git repository at %s: %w", path, err)
	}
	return repo, nil
}

// readPointer reads a small pointer file (a .git file, commondir) and
// returns the path it holds after prefix.
func readPointer(fs billy.Filesystem, name, prefix string) (string, error) {
	f, err := fs.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxGitPointerBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxGitPointerBytes {
		return "", fmt.Errorf("%s is larger than %d bytes", name, maxGitPointerBytes)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if !strings.HasPrefix(line, prefix) {
		return "", fmt.Errorf("%s has no %q prefix", name, prefix)
	}
	target := strings.TrimSpace(strings.TrimPrefix(line, prefix))
	if target == "" {
		return "", fmt.Errorf("%s is empty", name)
	}
	return target, nil
}

// boundChroot returns the directory target (absolute, or relative to the
// directory base, an absolute path under root) as a BoundOS filesystem of
// rootFS. A target that is lexically outside root is an error; one that
// leaves root through symbolic links is confined by BoundOS.
func boundChroot(rootFS billy.Filesystem, root, base, target string) (billy.Filesystem, error) {
	p := target
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	p = filepath.Clean(p)
	if !Within(p, root) {
		return nil, fmt.Errorf("%s is outside %s", p, root)
	}
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return nil, err
	}
	fs, err := rootFS.Chroot(rel)
	if err != nil {
		return nil, err
	}
	if fi, err := fs.Stat(""); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory inside %s", p, root)
	}
	return fs, nil
}

// Within reports whether p is dir or below it (both cleaned, absolute).
func Within(p, dir string) bool {
	return p == dir || dir == string(filepath.Separator) || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// alternatesFS is the filesystem go-git resolves objects/info/alternates
// with: the allowed directory, bound. go-git passes an absolute alternate
// path as is to Stat and Chroot; BoundOS joins it below its root (so a path
// outside root cannot escape), but Chroot does so without recognising a
// path that already names a directory under root. Such paths are made
// relative to root first, so that alternates inside the allowed directory
// work and everything else stays confined.
type alternatesFS struct {
	billy.Filesystem
	root string
}

func (a alternatesFS) rel(p string) string {
	if filepath.IsAbs(p) && Within(filepath.Clean(p), a.root) {
		if r, err := filepath.Rel(a.root, p); err == nil {
			return r
		}
	}
	return p
}

func (a alternatesFS) Stat(p string) (os.FileInfo, error) { return a.Filesystem.Stat(a.rel(p)) }

func (a alternatesFS) Chroot(p string) (billy.Filesystem, error) {
	return a.Filesystem.Chroot(a.rel(p))
}

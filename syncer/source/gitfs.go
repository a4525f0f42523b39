package source

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// gitMount is where gitFS shows the repository's root to kustomize, which
// works with absolute paths. Errors kustomize writes name paths under it.
const gitMount = "/repo"

// maxSymlinkBytes bounds a symbolic link's blob (its target path).
const maxSymlinkBytes = 4096

// errReadOnly is returned by every gitFS write.
var errReadOnly = errors.New("the repository is read-only during a render")

// gitFS is a kustomize filesys.FileSystem over one commit's tree: read
// only, lazy (a tree or blob is read when kustomize asks for it), every read
// charged to the render's budget (per-file and per-render bytes, files),
// paths confined to the repository (anything outside gitMount does not
// exist), and symbolic links resolved inside the repository (a link whose
// target is absolute or leaves the repository does not resolve).
//
// kustomize's own in-memory filesystem (filesys.MakeFsInMemory) is not used:
// filling it means reading every file of the tree up front, before any
// limit could say which ones a build needs, and it has no notion of
// symbolic links; the on-disk one needs an export to disk (what deputy did
// before), which reads and writes every file too and exposes the host's
// filesystem to a path that escapes.
//
// With remote resources on (disk non-nil), kustomize clones Git bases with
// the git binary into directories under the system temporary directory and
// reads them through this filesystem: paths inside such a clone are served
// from disk through an os.Root (which refuses links leaving it), with the
// same budget, and RemoveAll of a clone directory (kustomize's cleanup) is
// allowed.
type gitFS struct {
	repo   *git.Repository
	root   *object.Tree
	budget *renderBudget
	disk   *cloneDirs

	mu    sync.Mutex
	trees map[plumbing.Hash]*object.Tree
}

var _ filesys.FileSystem = (*gitFS)(nil)

func newGitFS(repo *git.Repository, root *object.Tree, budget *renderBudget) *gitFS {
	return &gitFS{repo: repo, root: root, budget: budget, trees: map[plumbing.Hash]*object.Tree{root.Hash: root}}
}

// node is a resolved path: a directory (tree) or a file (entry).
type node struct {
	rel   string // repository-relative, symbolic links resolved; "" is the root
	tree  *object.Tree
	entry object.TreeEntry
}

func (n *node) isDir() bool { return n.tree != nil }

// relPath turns a kustomize path into a repository-relative one; ok is false
// for a path outside the repository.
func relPath(p string) (string, bool) {
	p = filepath.ToSlash(p)
	if !path.IsAbs(p) {
		p = path.Join(gitMount, p)
	}
	p = path.Clean(p)
	if p == gitMount {
		return "", true
	}
	if !strings.HasPrefix(p, gitMount+"/") {
		return "", false
	}
	return strings.TrimPrefix(p, gitMount+"/"), true
}

// tree reads (and caches) a tree object, charging its size to the budget.
func (g *gitFS) tree(h plumbing.Hash, name string) (*object.Tree, error) {
	g.mu.Lock()
	t, ok := g.trees[h]
	g.mu.Unlock()
	if ok {
		return t, nil
	}
	if err := checkObjectSize(g.repo, h, plumbing.TreeObject, "the tree of "+displayPath(name), g.budget); err != nil {
		return nil, err
	}
	t, err := g.repo.TreeObject(h)
	if err != nil {
		return nil, fmt.Errorf("failed to read the tree of %s: %w", displayPath(name), err)
	}
	g.mu.Lock()
	g.trees[h] = t
	g.mu.Unlock()
	return t, nil
}

// checkObjectSize charges an object's declared size (read from its header,
// without inflating it) as metadata.
func checkObjectSize(repo *git.Repository, h plumbing.Hash, t plumbing.ObjectType, what string, b *renderBudget) error {
	o, err := repo.Storer.EncodedObject(t, h)
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", what, err)
	}
	return b.metadata(what, o.Size())
}

func displayPath(rel string) string {
	if rel == "" {
		return "the repository root"
	}
	return rel
}

// resolve finds rel in the repository, following symbolic links (at most
// maxSymlinkDepth) inside it. Errors: fs.ErrNotExist (wrapped) for a path
// that does not exist; a link error for a link that leaves the repository.
func (g *gitFS) resolve(rel string) (*node, error) {
	return g.resolveDepth(rel, 0)
}

func (g *gitFS) resolveDepth(rel string, depth int) (*node, error) {
	cur := &node{rel: "", tree: g.root}
	if rel == "" || rel == "." {
		return cur, nil
	}
	segs := strings.Split(rel, "/")
	for i, seg := range segs {
		if seg == "" || seg == "." {
			continue
		}
		if !cur.isDir() {
			return nil, fmt.Errorf("%s: %w (%s is a file)", rel, fs.ErrNotExist, cur.rel)
		}
		e, err := cur.tree.FindEntry(seg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, fs.ErrNotExist)
		}
		name := path.Join(cur.rel, seg)
		switch e.Mode {
		case filemode.Dir:
			t, err := g.tree(e.Hash, name)
			if err != nil {
				return nil, err
			}
			cur = &node{rel: name, tree: t}
		case filemode.Symlink:
			if depth >= maxSymlinkDepth {
				return nil, fmt.Errorf("%s: more than %d levels of symbolic links", name, maxSymlinkDepth)
			}
			target, err := g.readBlob(name, *e, maxSymlinkBytes, false)
			if err != nil {
				return nil, fmt.Errorf("failed to read symbolic link %s: %w", name, err)
			}
			next, err := symlinkTarget(name, string(target))
			if err != nil {
				return nil, err
			}
			rest := strings.Join(segs[i+1:], "/")
			return g.resolveDepth(path.Join(next, rest), depth+1)
		case filemode.Submodule:
			return nil, fmt.Errorf("%s: %w (a submodule; deputy does not fetch submodules)", name, fs.ErrNotExist)
		default:
			cur = &node{rel: name, entry: *e}
		}
	}
	return cur, nil
}

// readBlob reads a blob whose declared size must be within limit (and, when
// charge is set, the render's budget as one file) before it is read: a
// blob is never read whole without knowing its size first.
func (g *gitFS) readBlob(name string, e object.TreeEntry, limit int64, charge bool) ([]byte, error) {
	return blobBytes(g.repo, name, e.Hash, limit, g.budgetIf(charge))
}

func (g *gitFS) budgetIf(charge bool) *renderBudget {
	if charge {
		return g.budget
	}
	return nil
}

// blobBytes reads a blob after checking its declared size: against limit,
// and against the budget (as the file name) when b is not nil. The reader is
// bounded by the declared size, so a storage that lies cannot make it read
// more.
func blobBytes(repo *git.Repository, name string, h plumbing.Hash, limit int64, b *renderBudget) ([]byte, error) {
	blob, err := repo.BlobObject(h)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", name, err)
	}
	if b != nil {
		if err := b.file(name, blob.Size); err != nil {
			return nil, err
		}
	}
	if blob.Size > limit {
		if b == nil {
			return nil, fmt.Errorf("%s is larger than %d bytes", name, limit)
		}
		return nil, &LimitError{Field: FieldMaxFileBytes, What: fmt.Sprintf("file %q (%s)", name, bytesString(blob.Size)), Limit: bytesString(limit)}
	}
	r, err := blob.Reader()
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", name, err)
	}
	defer r.Close()
	buf := make([]byte, blob.Size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", name, err)
	}
	return buf, nil
}

// ReadFile implements filesys.FileSystem.
func (g *gitFS) ReadFile(p string) ([]byte, error) {
	if rel, ok := relPath(p); ok {
		n, err := g.resolve(rel)
		if err != nil {
			return nil, err
		}
		if n.isDir() {
			return nil, fmt.Errorf("%s is a directory", displayPath(n.rel))
		}
		return g.readBlob(n.rel, n.entry, g.budget.limits.MaxFileBytes, true)
	}
	if g.disk != nil {
		return g.disk.readFile(p, g.budget)
	}
	return nil, fmt.Errorf("%s: %w (outside the repository)", p, fs.ErrNotExist)
}

// Exists implements filesys.FileSystem.
func (g *gitFS) Exists(p string) bool {
	if rel, ok := relPath(p); ok {
		_, err := g.resolve(rel)
		return err == nil
	}
	if g.disk != nil {
		_, err := g.disk.stat(p)
		return err == nil
	}
	return false
}

// IsDir implements filesys.FileSystem.
func (g *gitFS) IsDir(p string) bool {
	if rel, ok := relPath(p); ok {
		n, err := g.resolve(rel)
		return err == nil && n.isDir()
	}
	if g.disk != nil {
		fi, err := g.disk.stat(p)
		return err == nil && fi.IsDir()
	}
	return false
}

// ReadDir implements filesys.FileSystem: the names in a directory, sorted.
func (g *gitFS) ReadDir(p string) ([]string, error) {
	if rel, ok := relPath(p); ok {
		n, err := g.resolve(rel)
		if err != nil {
			return nil, err
		}
		if !n.isDir() {
			return nil, fmt.Errorf("%s is not a directory", displayPath(n.rel))
		}
		names := make([]string, 0, len(n.tree.Entries))
		for _, e := range n.tree.Entries {
			if e.Mode != filemode.Submodule {
				names = append(names, e.Name)
			}
		}
		sort.Strings(names)
		return names, nil
	}
	if g.disk != nil {
		return g.disk.readDir(p)
	}
	return nil, fmt.Errorf("%s: %w (outside the repository)", p, fs.ErrNotExist)
}

// CleanedAbs implements filesys.FileSystem as kustomize's on-disk one does
// for directories (a directory is returned as itself, symbolic links
// resolved), but a file is returned as its resolved directory and its own
// name, even when that name is a symbolic link: a link to a file elsewhere
// in the repository reads as a copy of it where the link is (as when deputy
// exported the tree to disk), instead of as a file outside the
// kustomization's root.
func (g *gitFS) CleanedAbs(p string) (filesys.ConfirmedDir, string, error) {
	if rel, ok := relPath(p); ok {
		n, err := g.resolve(rel)
		if err != nil {
			return "", "", fmt.Errorf("'%s' does not exist in the repository: %w", p, err)
		}
		if n.isDir() {
			return filesys.ConfirmedDir(path.Join(gitMount, n.rel)), "", nil
		}
		parent, err := g.resolve(path.Dir(rel))
		if err != nil {
			return "", "", fmt.Errorf("'%s' does not exist in the repository: %w", p, err)
		}
		return filesys.ConfirmedDir(path.Join(gitMount, parent.rel)), path.Base(rel), nil
	}
	if g.disk != nil {
		return g.disk.cleanedAbs(p)
	}
	return "", "", fmt.Errorf("'%s': %w (outside the repository)", p, fs.ErrNotExist)
}

// Glob implements filesys.FileSystem: pattern's last element is matched
// (path.Match) against one directory's entries, as filepath.Glob does for
// a pattern without meta characters in its directory part; others are an
// error (kustomize's build does not glob).
func (g *gitFS) Glob(pattern string) ([]string, error) {
	dir, file := path.Split(filepath.ToSlash(pattern))
	if strings.ContainsAny(dir, `*?[\`) {
		return nil, fmt.Errorf("glob %q: only the last path element may have wildcards here", pattern)
	}
	names, err := g.ReadDir(path.Clean(dir))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, n := range names {
		if ok, err := path.Match(file, n); err != nil {
			return nil, err
		} else if ok && !strings.HasPrefix(n, ".") {
			out = append(out, path.Join(dir, n))
		}
	}
	return out, nil
}

// Walk implements filesys.FileSystem over the repository (kustomize's build
// does not walk; this exists for the interface).
func (g *gitFS) Walk(p string, walkFn filepath.WalkFunc) error {
	if g.IsDir(p) {
		if err := walkFn(p, dirInfo(path.Base(p)), nil); err != nil {
			if errors.Is(err, filepath.SkipDir) {
				return nil
			}
			return err
		}
		names, err := g.ReadDir(p)
		if err != nil {
			return walkFn(p, nil, err)
		}
		for _, n := range names {
			if err := g.Walk(path.Join(p, n), walkFn); err != nil && !errors.Is(err, filepath.SkipDir) {
				return err
			}
		}
		return nil
	}
	if !g.Exists(p) {
		return walkFn(p, nil, fs.ErrNotExist)
	}
	return walkFn(p, fileInfo{name: path.Base(p)}, nil)
}

// Open implements filesys.FileSystem: the file's content, read once.
func (g *gitFS) Open(p string) (filesys.File, error) {
	data, err := g.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return &memFile{Reader: bytes.NewReader(data), info: fileInfo{name: path.Base(p), size: int64(len(data))}}, nil
}

// Create, Mkdir, MkdirAll and WriteFile implement filesys.FileSystem: the
// repository is read-only.
func (g *gitFS) Create(string) (filesys.File, error) { return nil, errReadOnly }

// Mkdir implements filesys.FileSystem (read-only).
func (g *gitFS) Mkdir(string) error { return errReadOnly }

// MkdirAll implements filesys.FileSystem (read-only).
func (g *gitFS) MkdirAll(string) error { return errReadOnly }

// WriteFile implements filesys.FileSystem (read-only).
func (g *gitFS) WriteFile(string, []byte) error { return errReadOnly }

// RemoveAll implements filesys.FileSystem: only kustomize's clone
// directories (remote resources on) may be removed.
func (g *gitFS) RemoveAll(p string) error {
	if g.disk != nil && g.disk.isClone(p) {
		return os.RemoveAll(filepath.Clean(p))
	}
	return errReadOnly
}

type memFile struct {
	*bytes.Reader
	info fileInfo
}

func (f *memFile) Write([]byte) (int, error)  { return 0, errReadOnly }
func (f *memFile) Close() error               { return nil }
func (f *memFile) Stat() (os.FileInfo, error) { return f.info, nil }

type fileInfo struct {
	name string
	size int64
	dir  bool
}

func dirInfo(name string) fileInfo { return fileInfo{name: name, dir: true} }

func (i fileInfo) Name() string { return i.name }
func (i fileInfo) Size() int64  { return i.size }
func (i fileInfo) Mode() os.FileMode {
	if i.dir {
		return os.ModeDir | 0o555
	}
	return 0o444
}
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return i.dir }
func (i fileInfo) Sys() any           { return nil }

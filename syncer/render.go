package syncer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/policy/v1alpha1"
)

// kustomizationFiles are the names kustomize looks for, in its order.
var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// maxSymlinkDepth bounds how many symbolic links resolving one path may
// follow (a loop would otherwise never end).
const maxSymlinkDepth = 16

// rendered is an Application's manifests at one commit.
type rendered struct {
	// revision is the commit SHA the manifests come from.
	revision string
	objects  []*unstructured.Unstructured
}

// render fetches the source's repository, resolves revision (the
// operation's override, else the source's targetRevision, else HEAD) and
// renders the manifests under the source's path: `kustomize build` when the
// path holds a kustomization, else every .yaml, .yml and .json file below it
// (recursively, hidden files and directories skipped) in lexical order of
// their paths, every YAML document of each.
func (c *repoCache) render(ctx context.Context, src v1alpha1.ApplicationSource, revision string) (*rendered, error) {
	if err := helmError(src); err != nil {
		return nil, err
	}
	if revision == "" {
		revision = src.TargetRevision
	}
	dir, err := cleanSourcePath(src.Path)
	if err != nil {
		return nil, err
	}
	opened, err := c.open(ctx, src.RepoURL)
	if err != nil {
		return nil, err
	}
	released := false
	release := func() {
		if !released {
			released = true
			opened.release()
		}
	}
	defer release()

	commit, err := resolveRevision(opened.repo, revision)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.RepoURL, err)
	}
	out := &rendered{revision: commit.Hash.String()}
	root, err := commit.Tree()
	if err != nil {
		return out, fmt.Errorf("failed to read the tree of %s: %w", out.revision, err)
	}
	sub := root
	if dir != "" {
		if sub, err = root.Tree(dir); err != nil {
			return out, fmt.Errorf("path %q does not exist (or is not a directory) in %s at %s: fix spec.source.path", src.Path, src.RepoURL, short(out.revision))
		}
	}
	hasKustomization := false
	for _, e := range sub.Entries {
		for _, k := range kustomizationFiles {
			if e.Name == k && e.Mode != filemode.Dir {
				hasKustomization = true
			}
		}
	}
	if !hasKustomization {
		if _, err := sub.FindEntry("Chart.yaml"); err == nil {
			return out, fmt.Errorf("path %q holds a Helm chart (Chart.yaml): %w", src.Path, errHelm)
		}
		out.objects, err = renderPlain(opened.repo, root, sub, dir)
		if err != nil {
			return out, err
		}
		return out, nil
	}

	// kustomize reads from disk: export the whole tree (bases may live
	// outside the path), then build with the repository lock released.
	work, err := os.MkdirTemp(c.workDir(), "render-")
	if err != nil {
		return out, fmt.Errorf("failed to create a working directory: %w", err)
	}
	defer os.RemoveAll(work)
	if err := exportTree(opened.repo, root, work); err != nil {
		return out, err
	}
	release()
	out.objects, err = kustomizeBuild(filepath.Join(work, filepath.FromSlash(dir)))
	if err != nil {
		return out, fmt.Errorf("kustomize build %s at %s: %w", cmpOr(src.Path, "."), short(out.revision), err)
	}
	return out, nil
}

func (c *repoCache) workDir() string {
	d := filepath.Join(c.dir, "work")
	_ = os.MkdirAll(d, 0o700)
	return d
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// cleanSourcePath returns the slash-separated path relative to the
// repository root ("" for the root), refusing one that leaves it.
func cleanSourcePath(p string) (string, error) {
	if p == "" || p == "." || p == "/" {
		return "", nil
	}
	c := path.Clean(strings.TrimPrefix(p, "/"))
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("spec.source.path %q leaves the repository: use a path inside it", p)
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}

// renderPlain decodes every manifest file under sub (at dir in root).
func renderPlain(repo *git.Repository, root, sub *object.Tree, dir string) ([]*unstructured.Unstructured, error) {
	type file struct {
		name  string
		entry object.TreeEntry
	}
	var files []file
	w := object.NewTreeWalker(sub, true, nil)
	defer w.Close()
	for {
		name, entry, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("failed to walk %s: %w", cmpOr(dir, "."), err)
		}
		if entry.Mode == filemode.Dir || entry.Mode == filemode.Submodule || hidden(name) || !manifestFile(name) {
			continue
		}
		files = append(files, file{name, entry})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })

	var objs []*unstructured.Unstructured
	for _, f := range files {
		full := path.Join(dir, f.name)
		data, err := readEntry(repo, root, full, f.entry)
		if err != nil {
			return nil, err
		}
		docs, err := decodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", full, err)
		}
		objs = append(objs, docs...)
	}
	return objs, nil
}

func hidden(name string) bool {
	for _, seg := range strings.Split(name, "/") {
		if strings.HasPrefix(seg, ".") {
			return true
		}
	}
	return false
}

func manifestFile(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// readEntry reads a file, following symbolic links that stay inside the
// repository (a link leaving it could expose deputy's own files).
func readEntry(repo *git.Repository, root *object.Tree, full string, entry object.TreeEntry) ([]byte, error) {
	for depth := 0; entry.Mode == filemode.Symlink; depth++ {
		if depth == maxSymlinkDepth {
			return nil, fmt.Errorf("%s: more than %d levels of symbolic links", full, maxSymlinkDepth)
		}
		target, err := blobBytes(repo, entry)
		if err != nil {
			return nil, fmt.Errorf("failed to read symbolic link %s: %w", full, err)
		}
		next, err := symlinkTarget(full, string(target))
		if err != nil {
			return nil, err
		}
		e, err := root.FindEntry(next)
		if err != nil {
			return nil, fmt.Errorf("symbolic link %s points to %s, which does not exist in the repository", full, next)
		}
		if e.Mode == filemode.Dir {
			return nil, fmt.Errorf("symbolic link %s points to the directory %s: deputy follows links to files only", full, next)
		}
		full, entry = next, *e
	}
	return blobBytes(repo, entry)
}

// symlinkTarget resolves a link's target relative to the link's directory
// and refuses targets outside the repository.
func symlinkTarget(link, target string) (string, error) {
	if path.IsAbs(target) {
		return "", fmt.Errorf("symbolic link %s points to the absolute path %s: links must stay inside the repository", link, target)
	}
	p := path.Join(path.Dir(link), target)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("symbolic link %s points to %s, outside the repository: links must stay inside it", link, target)
	}
	return p, nil
}

func blobBytes(repo *git.Repository, entry object.TreeEntry) ([]byte, error) {
	b, err := repo.BlobObject(entry.Hash)
	if err != nil {
		return nil, err
	}
	r, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// exportTree writes every file of root under dir (symbolic links inside the
// repository become copies of their targets; submodules are skipped).
func exportTree(repo *git.Repository, root *object.Tree, dir string) error {
	w := object.NewTreeWalker(root, true, nil)
	defer w.Close()
	for {
		name, entry, err := w.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("failed to walk the repository: %w", err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		switch entry.Mode {
		case filemode.Dir:
			if err := os.MkdirAll(dst, 0o700); err != nil {
				return err
			}
			continue
		case filemode.Submodule:
			continue
		}
		data, err := readEntry(repo, root, name, entry)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			return fmt.Errorf("failed to export %s: %w", name, err)
		}
	}
}

// kustomizeBuild runs `kustomize build dir` in process (krusty with its
// defaults: loads restricted to the kustomization root, plugins and Helm
// disabled).
func kustomizeBuild(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("failed to encode %s: %w", r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("failed to decode %s: %w", r.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// decodeManifests splits multi-document YAML (or JSON) into objects; empty
// documents are skipped and a List's items are expanded, as kubectl does.
func decodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("document %d is not a Kubernetes object (it needs apiVersion and kind): %w", doc, err)
		}
		if u.IsList() {
			err := u.EachListItem(func(o runtime.Object) error {
				item, ok := o.(*unstructured.Unstructured)
				if !ok {
					return fmt.Errorf("list item of type %T", o)
				}
				objs = append(objs, item)
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("document %d: %w", doc, err)
			}
			continue
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("document %d has no apiVersion or kind", doc)
		}
		objs = append(objs, u)
	}
}

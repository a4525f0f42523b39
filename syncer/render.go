package syncer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/policy/v1alpha1"
)

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
// their paths, every YAML document of each. Everything is read lazily from
// the Git objects through gitFS, within the render limits (c.limits): a
// limit exceeded is a *LimitError naming its configuration field.
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
	// The repository stays locked (against a concurrent fetch into the same
	// mirror) while its objects are read, kustomize's build included.
	defer opened.release()

	commit, err := resolveRevision(opened.repo, revision)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.RepoURL, err)
	}
	out := &rendered{revision: commit.Hash.String()}
	budget := newRenderBudget(ctx, c.limits)
	if err := checkObjectSize(opened.repo, commit.TreeHash, plumbing.TreeObject, "the root tree", budget); err != nil {
		return out, err
	}
	root, err := commit.Tree()
	if err != nil {
		return out, fmt.Errorf("failed to read the tree of %s: %w", out.revision, err)
	}
	gfs := newGitFS(opened.repo, root, budget)
	if c.kustomize.RemoteResources {
		gfs.disk = kustomizeCloneDirs()
	}
	sub, err := gfs.resolve(dir)
	if err != nil && (isLimitError(err) || ctx.Err() != nil) {
		return out, err
	}
	if err != nil || !sub.isDir() {
		return out, fmt.Errorf("path %q does not exist (or is not a directory) in %s at %s: fix spec.source.path", src.Path, src.RepoURL, short(out.revision))
	}
	hasKustomization := false
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if n, err := gfs.resolve(path.Join(sub.rel, name)); err == nil && !n.isDir() {
			hasKustomization = true
		}
	}
	if !hasKustomization {
		if _, err := sub.tree.FindEntry("Chart.yaml"); err == nil {
			return out, fmt.Errorf("path %q holds a Helm chart (Chart.yaml): %w", src.Path, errHelm)
		}
		out.objects, err = renderPlain(gfs, sub)
		if err != nil {
			return out, err
		}
		return out, nil
	}
	out.objects, err = kustomizeBuild(ctx, gfs, sub.rel, c.kustomize)
	if err != nil {
		return out, fmt.Errorf("kustomize build %s at %s: %w", cmpOr(src.Path, "."), short(out.revision), err)
	}
	return out, nil
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

// renderPlain decodes every manifest file below sub: files in lexical order
// of their paths, symbolic links to files followed inside the repository.
func renderPlain(gfs *gitFS, sub *node) ([]*unstructured.Unstructured, error) {
	type file struct {
		name  string // relative to sub
		entry object.TreeEntry
	}
	var files []file
	var walk func(t *object.Tree, prefix string) error
	walk = func(t *object.Tree, prefix string) error {
		for _, e := range t.Entries {
			name := path.Join(prefix, e.Name)
			switch {
			case strings.HasPrefix(e.Name, "."), e.Mode == filemode.Submodule:
			case e.Mode == filemode.Dir:
				child, err := gfs.tree(e.Hash, path.Join(sub.rel, name))
				if err != nil {
					return err
				}
				if err := walk(child, name); err != nil {
					return err
				}
			case manifestFile(e.Name):
				files = append(files, file{name, e})
			}
		}
		return nil
	}
	if err := walk(sub.tree, ""); err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })

	var objs []*unstructured.Unstructured
	for _, f := range files {
		full := path.Join(sub.rel, f.name)
		n := &node{rel: full, entry: f.entry}
		if f.entry.Mode == filemode.Symlink {
			var err error
			if n, err = gfs.resolve(full); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("symbolic link %s points to a path that does not exist in the repository", full)
				}
				return nil, err
			}
			if n.isDir() {
				return nil, fmt.Errorf("symbolic link %s points to the directory %s: deputy follows links to files only", full, n.rel)
			}
		}
		data, err := gfs.readBlob(full, n.entry, gfs.budget.limits.MaxFileBytes, true)
		if err != nil {
			return nil, err
		}
		docs, err := decodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", full, err)
		}
		objs = append(objs, docs...)
		if err := gfs.budget.objects(len(objs)); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

func manifestFile(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
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
	if p == "." {
		p = ""
	}
	return p, nil
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

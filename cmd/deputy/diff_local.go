package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/internal/manifest"
)

// Bounds of what --local reads: the files' bytes (deputy's request limit,
// v1alpha1.MaxLocalDiffRequestBytes, bounds the encoded manifests too) and
// the objects.
const (
	maxLocalBytes   = 8 << 20
	maxLocalObjects = 10000
)

// localDiffCall is deputy diff --local's API call: a POST, verb create.
var localDiffCall = apiCall{command: "deputy diff --local", grant: "verb create on applications/diff"}

// kustomizationNames are the files that make a directory a kustomization,
// as kustomize looks for them.
var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// errLocalChart refuses a chart directory.
var errLocalChart = errors.New("--local does not render Helm charts: run helm template and point --local at its output")

// localReader reads what --local names within the bounds.
type localReader struct {
	root  string // DIR with its symbolic links resolved
	bytes int64
	warn  func(string)
}

// readLocal reads the manifests of dir as a sync would render a directory
// of plain manifests or a kustomization (kustomize build in this process:
// only files inside dir, no remote bases or files, no plugins, no Helm);
// a chart is refused. warn receives what was skipped.
func readLocal(dir string, warn func(string)) ([]map[string]any, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("--local %s: %w", dir, err)
	}
	if st, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("--local %s: %w", dir, err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("--local %s is not a directory: name the directory of the manifests", dir)
	}
	r := &localReader{root: root, warn: warn}
	if _, err := os.Stat(filepath.Join(root, "Chart.yaml")); err == nil {
		return nil, errLocalChart
	}
	var objs []*unstructured.Unstructured
	for _, k := range kustomizationNames {
		if _, err := os.Stat(filepath.Join(root, k)); err == nil {
			objs, err = r.kustomize()
			if err != nil {
				return nil, fmt.Errorf("--local %s (kustomize build): %w", dir, err)
			}
			return r.finish(dir, objs)
		}
	}
	if objs, err = r.plain(); err != nil {
		return nil, fmt.Errorf("--local %s: %w", dir, err)
	}
	return r.finish(dir, objs)
}

// finish checks the objects and returns their content: none is an error,
// objects without metadata.name (generateName hooks, which a diff leaves
// out anyway) are skipped with a warning.
func (r *localReader) finish(dir string, objs []*unstructured.Unstructured) ([]map[string]any, error) {
	out := make([]map[string]any, 0, len(objs))
	for _, o := range objs {
		if o.GetName() == "" {
			if o.GetGenerateName() != "" {
				r.warn(fmt.Sprintf("--local: %s with generateName %q skipped: only hooks may use generateName, and a diff leaves hooks out", o.GetKind(), o.GetGenerateName()))
				continue
			}
			return nil, fmt.Errorf("--local %s: a %s (apiVersion %s) has no metadata.name: set it", dir, o.GetKind(), o.GetAPIVersion())
		}
		out = append(out, o.Object)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--local %s holds no manifests (.yaml, .yml or .json files, or a kustomization): point it at the directory of the manifests", dir)
	}
	return out, nil
}

// read reads one file (real path p, shown as name) within the bounds;
// a symbolic link must lead to a file inside the root.
func (r *localReader) read(p, name string) ([]byte, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, err
	}
	if rel, err := filepath.Rel(r.root, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("%s is a symbolic link out of the directory: --local reads only files inside it", name)
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (links are followed to files only)", name)
	}
	if r.bytes+st.Size() > maxLocalBytes {
		return nil, fmt.Errorf("the files hold more than %d bytes (at %s): --local reads at most %d MiB; point it at a smaller directory", maxLocalBytes, name, maxLocalBytes>>20)
	}
	f, err := os.Open(real)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxLocalBytes-r.bytes+1))
	if err != nil {
		return nil, err
	}
	r.bytes += int64(len(data))
	if r.bytes > maxLocalBytes {
		return nil, fmt.Errorf("the files hold more than %d bytes (at %s): --local reads at most %d MiB; point it at a smaller directory", maxLocalBytes, name, maxLocalBytes>>20)
	}
	return data, nil
}

// plain reads every .yaml, .yml and .json file below the root
// (recursively, hidden files and directories skipped, in lexical order of
// their paths), every YAML document of each, Lists expanded: a plain
// source's render.
func (r *localReader) plain() ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r.root, p)
		switch {
		case p == r.root:
			return nil
		case strings.HasPrefix(d.Name(), "."):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir() || !localManifestFile(d.Name()):
			return nil
		}
		data, err := r.read(p, rel)
		if err != nil {
			return err
		}
		docs, err := manifest.Decode(data)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		objs = append(objs, docs...)
		if len(objs) > maxLocalObjects {
			return fmt.Errorf("more than %d objects (at %s): --local reads at most %d", maxLocalObjects, rel, maxLocalObjects)
		}
		return nil
	})
	return objs, err
}

func localManifestFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// kustomize copies the root's files (hidden directories skipped) into an
// in-memory filesystem, checks every kustomization's references (files and
// directories inside it only: no remote bases, no http(s) files) and runs
// kustomize build there with deputy's settings: loads restricted to each
// kustomization's root, builtin plugins only, Helm off.
func (r *localReader) kustomize() ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r.root, p)
		switch {
		case p == r.root:
			return nil
		case d.IsDir() && strings.HasPrefix(d.Name(), "."):
			return filepath.SkipDir
		case d.IsDir():
			return mem.MkdirAll("/" + filepath.ToSlash(rel))
		}
		data, err := r.read(p, rel)
		if err != nil {
			return err
		}
		return mem.WriteFile("/"+filepath.ToSlash(rel), data)
	})
	if err != nil {
		return nil, err
	}
	if err := checkKustomization(mem, "/", map[string]bool{}, 0); err != nil {
		return nil, err
	}
	return runKustomize(mem)
}

// runKustomize builds the kustomization at the root of mem.
func runKustomize(mem filesys.FileSystem) (objs []*unstructured.Unstructured, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("kustomize failed unexpectedly: %v", p)
		}
	}()
	o := krusty.MakeDefaultOptions()
	o.LoadRestrictions = types.LoadRestrictionsRootOnly
	o.PluginConfig = types.DisabledPluginConfig()
	o.PluginConfig.HelmConfig = types.HelmConfig{Enabled: false}
	resMap, err := krusty.MakeKustomizer(o).Run(mem, "/")
	if err != nil {
		return nil, err
	}
	if n := resMap.Size(); n > maxLocalObjects {
		return nil, fmt.Errorf("it builds %d objects, more than the %d --local reads", n, maxLocalObjects)
	}
	for _, res := range resMap.Resources() {
		data, err := res.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("failed to encode %s: %w", res.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("%s: %w", res.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// localRefFields are the kustomization fields that name files or
// directories kustomize loads as resources (a directory: another
// kustomization).
var localRefFields = []string{"resources", "bases", "components", "crds"}

// checkKustomization refuses, in the kustomization of dir and those it
// references, every reference that is not a file or directory in mem and
// every remote URL anywhere: kustomize would clone or fetch them.
func checkKustomization(mem filesys.FileSystem, dir string, seen map[string]bool, depth int) error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	if depth > 64 {
		return fmt.Errorf("kustomizations reference one another more than 64 deep (at %s)", dir)
	}
	var file string
	for _, k := range kustomizationNames {
		if p := path.Join(dir, k); mem.Exists(p) && !mem.IsDir(p) {
			file = p
			break
		}
	}
	if file == "" {
		return nil // a plain directory of resources, or kustomize's own error
	}
	data, err := mem.ReadFile(file)
	if err != nil {
		return err
	}
	var k map[string]any
	if err := yaml.Unmarshal(data, &k); err != nil {
		return fmt.Errorf("%s: %w", strings.TrimPrefix(file, "/"), err)
	}
	shown := strings.TrimPrefix(file, "/")
	if u := remoteRef(k); u != "" {
		return fmt.Errorf("%s names %q: --local loads no remote content (only files inside the directory); run kustomize build yourself and point --local at its output", shown, u)
	}
	for _, f := range localRefFields {
		list, _ := k[f].([]any)
		for _, e := range list {
			ref, ok := e.(string)
			if !ok {
				continue
			}
			p := path.Join(dir, ref)
			if path.IsAbs(ref) || !mem.Exists(p) || strings.HasPrefix(p, "/..") {
				return fmt.Errorf("%s: %s entry %q is not a file or directory inside the directory: --local loads no remote bases and nothing outside it; run kustomize build yourself and point --local at its output", shown, f, ref)
			}
			if mem.IsDir(p) {
				if err := checkKustomization(mem, p, seen, depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// remoteFields are the kustomization fields whose strings kustomize loads
// (file lists, and in list items the keys named): a URL there is fetched.
var remoteFields = map[string][]string{
	"resources": nil, "bases": nil, "components": nil, "crds": nil, "patchesStrategicMerge": nil,
	"configurations": nil, "generators": nil, "transformers": nil, "validators": nil,
	"patches": {"path"}, "patchesJson6902": {"path"}, "replacements": {"path"},
	"configMapGenerator": {"files", "envs", "env"}, "secretGenerator": {"files", "envs", "env"},
	"openapi": {"path"},
}

// remoteRef is the first string of a field kustomize loads from that names
// remote content (a URL or a Git address), "" when none does.
func remoteRef(k map[string]any) string {
	for f, keys := range remoteFields {
		var vals []any
		switch v := k[f].(type) {
		case []any:
			vals = v
		case map[string]any:
			vals = []any{v}
		}
		for _, v := range vals {
			if m, ok := v.(map[string]any); ok {
				for _, key := range keys {
					if s := remoteString(m[key]); s != "" {
						return s
					}
				}
			} else if s := remoteString(v); s != "" {
				return s
			}
		}
	}
	return ""
}

// remoteString is the first string in v (a string or a list of them) that
// names remote content, "" when none does.
func remoteString(v any) string {
	switch v := v.(type) {
	case string:
		if strings.Contains(v, "://") || strings.HasPrefix(v, "git@") || strings.HasPrefix(v, "git::") {
			return v
		}
	case []any:
		for _, e := range v {
			if s := remoteString(e); s != "" {
				return s
			}
		}
	}
	return ""
}

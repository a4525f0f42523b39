package helm

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/policy/v1alpha1"
)

var fieldPath = field.NewPath("spec", "source", "helm")

// Validate checks spec.source.helm without reading anything
// (v1alpha1.HelmSource.Validate): every error at once, each naming its field
// and the fix.
func Validate(h *v1alpha1.HelmSource) error {
	return h.Validate(fieldPath).ToAggregate()
}

// resolvePath turns a values file or file parameter path into a path in
// the repository as Argo CD does: relative to the chart's directory, or to
// the repository's root when absolute; one that leaves the repository is
// refused.
func resolvePath(chartDir, p string) (string, error) {
	var full string
	if strings.HasPrefix(p, "/") {
		full = path.Clean(strings.TrimPrefix(p, "/"))
	} else {
		full = path.Join(chartDir, p)
	}
	if full == ".." || strings.HasPrefix(full, "../") {
		return "", fmt.Errorf("%s leaves the repository: give a path inside it", p)
	}
	if full == "." {
		full = ""
	}
	return full, nil
}

// resolveFile returns the repository and the path a value file or file
// parameter names: "$REF/path" is path from the root of refs[REF] (the
// repository of the source of spec.sources whose ref is REF), anything else
// a path in repo (resolvePath). An unknown REF names the refs that exist.
func resolveFile(repo Files, refs map[string]Files, chartDir, p string) (Files, string, error) {
	ref, rest, ok := v1alpha1.RefOf(p)
	if !ok {
		full, err := resolvePath(chartDir, p)
		return repo, full, err
	}
	files, found := refs[ref]
	if !found {
		names := slices.Sorted(maps.Keys(refs))
		return nil, "", fmt.Errorf("%s names $%s, but no source of spec.sources has ref %q (refs: %s): fix the path or set ref on the source it reads from", p, ref, ref, cmp.Or(strings.Join(names, ", "), "none"))
	}
	if hasDotDot(rest) {
		return nil, "", fmt.Errorf("%s leaves the repository of the source whose ref is %s: give a path inside it", p, ref)
	}
	return files, strings.TrimPrefix(path.Clean("/"+rest), "/"), nil
}

// hasDotDot reports whether a slash-separated path has a ".." segment.
func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// mergeValues merges the values as `helm template` with Argo CD's flags
// does: each values file in order (missing ones skipped with
// ignoreMissingValueFiles), values or valuesObject, then --set, then
// --set-string, then --set-file, later winning. The chart's own values.yaml
// is merged under these by Helm itself.
func mergeValues(repo Files, refs map[string]Files, chartDir string, h *v1alpha1.HelmSource) (map[string]any, error) {
	base := map[string]any{}
	for i, f := range h.ValueFiles {
		name := fieldPath.Child("valueFiles").Index(i).String()
		files, p, err := resolveFile(repo, refs, chartDir, f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		data, err := files.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) && h.IgnoreMissingValueFiles {
			continue
		}
		if errors.Is(err, fs.ErrNotExist) {
			if ref, _, ok := v1alpha1.RefOf(f); ok {
				return nil, fmt.Errorf("%s: values file %s does not exist in the repository of the source whose ref is %s (%s from its root): fix the path or set ignoreMissingValueFiles", name, f, ref, p)
			}
			return nil, fmt.Errorf("%s: values file %s does not exist in the repository: fix the path (relative to the chart's directory, or absolute from the repository's root) or set ignoreMissingValueFiles", name, p)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: values file %s: %w", name, p, err)
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("%s: values file %s is not a YAML map: %v: fix the file", name, p, err)
		}
		base = mergeMaps(base, m)
	}
	inline, err := h.ValuesMap()
	if err != nil {
		return nil, err
	}
	base = mergeMaps(base, inline)
	for _, force := range []bool{false, true} {
		for i, p := range h.Parameters {
			if p.ForceString != force {
				continue
			}
			set := p.Name + "=" + escapeCommas(p.Value)
			parse := strvals.ParseInto
			if force {
				parse = strvals.ParseIntoString
			}
			if err := parse(set, base); err != nil {
				return nil, fmt.Errorf("%s (%s): %v: fix the parameter's name or value", fieldPath.Child("parameters").Index(i), p.Name, err)
			}
		}
	}
	for i, fp := range h.FileParameters {
		name := fieldPath.Child("fileParameters").Index(i)
		files, p, err := resolveFile(repo, refs, chartDir, fp.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		read := func([]rune) (any, error) {
			data, err := files.ReadFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("file %s does not exist in the repository: fix the path", p)
			}
			return string(data), err
		}
		if err := strvals.ParseIntoFile(fp.Name+"="+p, base, read); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", name, fp.Name, err)
		}
	}
	return base, nil
}

// escapeCommas makes a parameter's value one value, as Argo CD does: a
// comma not already escaped is escaped, except in a {a,b} list.
func escapeCommas(v string) string {
	if strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") {
		return v
	}
	var b strings.Builder
	var prev rune
	for _, r := range v {
		if r == ',' && prev != '\\' {
			b.WriteString(`\,`)
		} else {
			b.WriteRune(r)
		}
		prev = r
	}
	return b.String()
}

// mergeMaps merges b into a copy of a, maps recursively, b winning (as
// Helm merges values files).
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if vm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// parseKubeVersion parses a kubeVersion as Argo CD does: the generic
// version (1.37.0-gke.1 is 1.37.0), then Helm's parse.
func parseKubeVersion(v string) (*chartutil.KubeVersion, error) {
	g, err := version.ParseGeneric(v)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w: give a Kubernetes version such as 1.37.0", fieldPath.Child("kubeVersion"), v, err)
	}
	kv, err := chartutil.ParseKubeVersion(g.String())
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w: give a Kubernetes version such as 1.37.0", fieldPath.Child("kubeVersion"), v, err)
	}
	return kv, nil
}

// Configured reports whether h asks for anything of a chart beyond the
// release's name and namespace and the capabilities (kubeVersion,
// apiVersions), which the sync engine (from the destination's discovery)
// and `deputy render --kube-version/--api-versions` fill in for every
// source: such a
// source must point at a chart.
func Configured(h *v1alpha1.HelmSource) bool {
	if h == nil {
		return false
	}
	c := *h
	c.ReleaseName, c.Namespace, c.KubeVersion, c.APIVersions = "", "", "", nil
	return !reflect.DeepEqual(c, v1alpha1.HelmSource{})
}

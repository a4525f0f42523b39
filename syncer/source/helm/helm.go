package helm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Files is the repository a chart is read from: paths are slash-separated
// and relative to the repository's root (symbolic links resolved inside it),
// a missing file's error wraps fs.ErrNotExist, and every read is charged to
// the render's limits (whose errors are returned unchanged).
type Files interface {
	ReadFile(path string) ([]byte, error)
	// ReadDir returns the names in a directory, sorted.
	ReadDir(path string) ([]string, error)
	IsDir(path string) bool
}

// defaultKubeVersion is .Capabilities.KubeVersion when spec.source.helm
// sets no kubeVersion: what the helm v3.22.0 release binary reports (its
// build stamps the version of its k8s.io modules, 1.37; the library alone
// says 1.20). The sync engine fills Source.KubeVersion with the destination
// cluster's version, so this applies to offline renders and to a
// destination whose /version could not be read.
const defaultKubeVersion = "v1.37.0"

// DependencyFunc fetches a remote Chart.yaml dependency d of the chart
// owner names (as messages name it) and returns its chart's files.
type DependencyFunc func(owner string, d *chart.Dependency) ([]*loader.BufferedFile, error)

// Options are one render.
type Options struct {
	// Files is the repository at the commit being rendered.
	Files Files
	// ChartDir is the chart's directory (it holds Chart.yaml), relative
	// to the repository's root; "" is the root.
	ChartDir string
	// Source is spec.source.helm with ReleaseName and Namespace defaulted
	// (the Application's name, the destination's namespace); nil renders
	// with no values but the chart's and release name "release-name".
	Source *v1alpha1.HelmSource
	// Archive, when set, is the chart instead of Files and ChartDir: the
	// files of a chart archive (a Helm repository's or an OCI registry's,
	// paths relative to the chart), with Label naming it in messages.
	// Values files and file parameters are paths in it.
	Archive []*loader.BufferedFile
	Label   string
	// Dependency fetches a Chart.yaml dependency of the top chart that
	// charts/ lacks and whose repository is not file:// (nil: such a
	// dependency is reported missing).
	Dependency DependencyFunc
	// Refs are the repositories of spec.sources' ref sources, by ref name,
	// each at its source's revision: a "$REF/path" value file or file
	// parameter reads path from the root of Refs[REF] (confined to it as
	// Files confines). nil: every $REF is unknown.
	Refs map[string]Files
	// CountObjects is called with the number of objects decoded so far, for
	// the render's object limit; a non-nil error stops the render.
	CountObjects func(n int) error
}

// Render renders the chart at opts.ChartDir as `helm template` with
// --include-crds (unless skipCrds) does: an install in client-only dry-run
// mode, `lookup` returning nothing, .Capabilities from
// Source.KubeVersion (else defaultKubeVersion) and APIVersions over Helm's
// defaults (the sync engine passes the destination's, from discovery),
// hooks after the other objects, each with its annotations (test hooks
// too, as helm template without --skip-tests). Objects come back in that
// order.
//
// Errors name the chart, the values file or the parameter and the fix; a
// template error carries the template and line Helm reports; errors of
// Files (limits) are wrapped, not replaced.
func Render(ctx context.Context, opts Options) ([]*unstructured.Unstructured, error) {
	src := opts.Source
	if src == nil {
		src = &v1alpha1.HelmSource{}
	}
	if err := Validate(src); err != nil {
		return nil, err
	}
	lo := loadOptions{remote: opts.Dependency, label: opts.Label}
	if opts.Archive != nil {
		opts.Files, opts.ChartDir, lo.packaged = archiveFiles(opts.Archive), "", true
	}
	ch, err := loadChart(opts.Files, opts.ChartDir, 0, lo)
	if err != nil {
		return nil, fmt.Errorf("loading the chart in %s: %w", cmp.Or(opts.Label, displayDir(opts.ChartDir)), err)
	}
	label := cmp.Or(opts.Label, fmt.Sprintf("chart %s (%s)", ch.Name(), displayDir(opts.ChartDir)))
	if t := ch.Metadata.Type; t != "" && t != "application" {
		return nil, fmt.Errorf("%s is of type %s, which helm template does not render: set spec.source.path to an application chart (one that depends on it)", label, t)
	}
	if err := action.CheckDependencies(ch, ch.Metadata.Dependencies); err != nil {
		if lo.packaged {
			return nil, fmt.Errorf("%s: %w: the chart's archive must hold it under charts/, or name its https:// or oci:// repository", label, err)
		}
		return nil, fmt.Errorf("%s: %w: vendor the dependency under charts/ (helm dependency build, then commit charts/), name it with a file:// repository inside the repository, or with its https:// or oci:// repository", label, err)
	}
	vals, err := mergeValues(opts.Files, opts.Refs, opts.ChartDir, src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	manifest, err := install(ctx, ch, vals, src)
	if err != nil {
		return nil, fmt.Errorf("helm template of %s: %w", label, err)
	}
	objs, err := decode(manifest, opts.CountObjects)
	if err != nil {
		return nil, fmt.Errorf("helm template of %s: %w", label, err)
	}
	return objs, nil
}

// install runs Helm's install as `helm template` does and returns its
// output: the manifests, then each hook with its source comment.
func install(ctx context.Context, ch *chart.Chart, vals map[string]any, src *v1alpha1.HelmSource) (string, error) {
	cfg := &action.Configuration{Log: func(string, ...any) {}}
	client := action.NewInstall(cfg)
	client.DryRun = true
	client.DryRunOption = "client"
	client.ClientOnly = true
	client.Replace = true
	client.ReleaseName = cmp.Or(src.ReleaseName, "release-name")
	client.Namespace = cmp.Or(src.Namespace, "default")
	client.IncludeCRDs = !src.SkipCrds
	client.SkipSchemaValidation = src.SkipSchemaValidation
	client.APIVersions = chartutil.VersionSet(src.APIVersions)
	kv, err := parseKubeVersion(cmp.Or(src.KubeVersion, defaultKubeVersion))
	if err != nil {
		return "", err
	}
	client.KubeVersion = kv
	rel, err := client.RunWithContext(ctx, ch, vals)
	if err != nil {
		switch msg := err.Error(); {
		case strings.Contains(msg, "release name"):
			return "", fmt.Errorf("%w: fix spec.source.helm.releaseName (default: the Application's name)", err)
		case strings.Contains(msg, "schema"):
			return "", fmt.Errorf("%w: fix the values it names (values files, values or parameters), or set spec.source.helm.skipSchemaValidation", err)
		}
		return "", fmt.Errorf("%w: fix the chart's templates or the values they need", err)
	}
	return templateOutput(rel), nil
}

// templateOutput is what `helm template` prints for rel.
func templateOutput(rel *release.Release) string {
	var b strings.Builder
	fmt.Fprintln(&b, strings.TrimSpace(rel.Manifest))
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return b.String()
}

// decode splits Helm's output into objects, skipping empty documents.
func decode(manifest string, count func(int) error) ([]*unstructured.Unstructured, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifest)), 4096)
	var out []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("the chart renders invalid YAML (object %d): %w", len(out)+1, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue // an empty document: a chart with no manifest but hooks starts with one
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("the chart renders a document that is not an object (object %d): %w", len(out)+1, err)
		}
		if len(m) == 0 {
			continue
		}
		if m["kind"] == nil || m["apiVersion"] == nil {
			return nil, fmt.Errorf("the chart renders an object without kind or apiVersion (object %d)", len(out)+1)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("the chart renders an invalid object (object %d): %w", len(out)+1, err)
		}
		out = append(out, u)
		if count != nil {
			if err := count(len(out)); err != nil {
				return nil, err
			}
		}
	}
}

func displayDir(dir string) string {
	if dir == "" {
		return "the repository's root"
	}
	return dir
}

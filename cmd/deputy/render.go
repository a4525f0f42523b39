package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/serve"
	"deputy.dev/deputy/syncer/source"
)

// maxApplicationFileBytes bounds -f: an Application manifest is a few KiB.
const maxApplicationFileBytes = 1 << 20

type renderFlags struct {
	file        string
	kubeconfig  string
	kubeContext string
	revisions   []string
	output      string
	cacheDir    string
	localRepos  []string
	kubeVersion string
	apiVersions []string
	configFile  string
}

func newRenderCommand() *cobra.Command {
	var f renderFlags
	cmd := &cobra.Command{
		Use:   "render (-f APPLICATION.yaml | NS/NAME --kubeconfig F) [--revision R]... [-o yaml|json] [--cache-dir DIR] [--local-repos DIR]... [--kube-version V] [--api-versions GV]... [--config FILE]",
		Short: "Print the manifests an Application renders to, offline, as helm template or kustomize build would",
		Long: `Render an Application's sources exactly as a sync does (the same function of
deputy's sync engine, in the same render workers, within the same limits) and
print the objects: YAML documents (-o yaml, the default) or a v1 List (-o json).
Nothing is applied and no AppProject is checked; the destination cluster is
never contacted.

The Application comes from a manifest (-f FILE, deputy.dev/v1alpha1 or
argoproj.io/v1alpha1) or from the cluster (NS/NAME with --kubeconfig: only the
Application is read). With spec.source, --revision overrides its
targetRevision; with spec.sources, give --revision once per source, in order
("" keeps that source's targetRevision), as operation.sync.revisions.

Repositories are fetched into --cache-dir (default: a temporary directory
removed at exit). Local repositories (file:// URLs, absolute paths) open only
under --local-repos directories (sync.localRepositories). --config takes the
sync section of a deputy configuration file (repository credentials in files,
limits, kustomize, localRepositories); flags add to it.

Helm's .Capabilities are the engine's defaults unless --kube-version and
--api-versions set them (for every source, as spec.source.helm.kubeVersion and
apiVersions would). The exit code is 1 with the engine's error.`,
		Example: `  deputy render -f guestbook.yaml
  deputy render -f app.yaml --local-repos /srv/git -o json
  deputy render argocd/guestbook --kubeconfig ~/.kube/config --revision v1.2.0
  deputy render -f multi.yaml --revision "" --revision 3f2a9c1 --config deputy.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			app, err := renderApplicationArg(cmd.Context(), &f, args)
			if err != nil {
				return err
			}
			return runRender(cmd.Context(), &f, app, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.file, "filename", "f", "", "an Application manifest (YAML or JSON) to render")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "read the Application NS/NAME from this cluster (only the Application is read)")
	fs.StringVar(&f.kubeContext, "context", "", "kubeconfig context")
	fs.StringArrayVar(&f.revisions, "revision", nil, "revision to render instead of targetRevision; with spec.sources once per source, in order (\"\" keeps a source's)")
	fs.StringVarP(&f.output, "output", "o", "yaml", "output format: yaml (documents) or json (a v1 List)")
	fs.StringVar(&f.cacheDir, "cache-dir", "", "directory for repository clones (default: a temporary directory removed at exit)")
	fs.StringArrayVar(&f.localRepos, "local-repos", nil, "directory under which local repositories may be opened (sync.localRepositories); repeatable")
	fs.StringVar(&f.kubeVersion, "kube-version", "", "Helm's .Capabilities.KubeVersion (default: the engine's)")
	fs.StringArrayVar(&f.apiVersions, "api-versions", nil, "Helm's .Capabilities.APIVersions, GROUP/VERSION[/KIND]; repeatable")
	fs.StringVar(&f.configFile, "config", "", "deputy configuration file whose sync section (credentials, limits, kustomize, localRepositories) applies")
	return cmd
}

// renderApplicationArg reads the Application from -f or, for NS/NAME, from
// the cluster.
func renderApplicationArg(ctx context.Context, f *renderFlags, args []string) (*v1alpha1.Application, error) {
	switch {
	case f.file != "" && len(args) > 0:
		return nil, errors.New("give -f FILE or NS/NAME, not both")
	case f.file != "":
		return readApplicationFile(f.file)
	case len(args) == 0:
		return nil, errors.New("name the Application: -f APPLICATION.yaml, or NS/NAME with --kubeconfig")
	case f.kubeconfig == "":
		return nil, fmt.Errorf("reading %s from a cluster needs --kubeconfig (or render a manifest with -f)", args[0])
	}
	ns, name, ok := strings.Cut(args[0], "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("%q is not NS/NAME: name the Application as namespace/name", args[0])
	}
	return readClusterApplication(ctx, config.Cluster{Kubeconfig: f.kubeconfig, Context: f.kubeContext}, ns, name)
}

// readApplicationFile decodes one Application (deputy.dev/v1alpha1, strictly:
// an unknown field is an error; or argoproj.io/v1alpha1, whose fields beyond
// deputy's subset are ignored, except those that change the render:
// refuseUnrenderedFields).
func readApplicationFile(name string) (*v1alpha1.Application, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxApplicationFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", name, err)
	}
	if len(data) > maxApplicationFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes: give one Application manifest", name, maxApplicationFileBytes)
	}
	// sigs.k8s.io/yaml reads the first document only: a second one would
	// be dropped without a word.
	docs := 0
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) > 0 && strings.Trim(strings.TrimSpace(string(doc)), "-") != "" {
			docs++
		}
	}
	if docs > 1 {
		return nil, fmt.Errorf("%s holds %d YAML documents: give one Application (render each from a file of its own)", name, docs)
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if tm.Kind != "Application" || (tm.APIVersion != v1alpha1.Group+"/"+v1alpha1.Version && tm.APIVersion != "argoproj.io/v1alpha1") {
		what := strings.TrimSpace(tm.APIVersion + " " + tm.Kind)
		if what == "" {
			what = "no apiVersion and kind"
		}
		return nil, fmt.Errorf("%s holds %s: give one Application (deputy.dev/v1alpha1 or argoproj.io/v1alpha1)", name, what)
	}
	app := &v1alpha1.Application{}
	decode := yaml.UnmarshalStrict
	if tm.APIVersion == "argoproj.io/v1alpha1" {
		decode = yaml.Unmarshal
	}
	if err := decode(data, app); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if tm.APIVersion == "argoproj.io/v1alpha1" {
		if err := refuseUnrenderedFields(data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return app, nil
}

// unrenderedFields are the fields of Argo CD's ApplicationSource that
// change what a source renders and that deputy does not implement.
var unrenderedFields = []string{"kustomize", "directory", "plugin"}

// refuseUnrenderedFields fails when an argoproj.io Application's source
// sets a field of unrenderedFields: ignored, it would print something other
// than what Argo CD renders. Other Argo CD fields deputy lacks
// (ignoreDifferences, info, ...) do not change the render and are ignored.
func refuseUnrenderedFields(data []byte) error {
	var m struct {
		Spec struct {
			Source  map[string]any   `json:"source"`
			Sources []map[string]any `json:"sources"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return err
	}
	check := func(path string, src map[string]any) error {
		for _, f := range unrenderedFields {
			if _, ok := src[f]; ok {
				return fmt.Errorf("%s.%s (Argo CD's) is not supported by deputy, and ignoring it would render something else: remove it (kustomize overrides belong in the kustomization)", path, f)
			}
		}
		return nil
	}
	if err := check("spec.source", m.Spec.Source); err != nil {
		return err
	}
	for i, src := range m.Spec.Sources {
		if err := check(fmt.Sprintf("spec.sources[%d]", i), src); err != nil {
			return err
		}
	}
	return nil
}

// readClusterApplication reads one deputy.dev Application.
func readClusterApplication(ctx context.Context, c config.Cluster, ns, name string) (*v1alpha1.Application, error) {
	restCfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	u, err := dc.Resource(v1alpha1.SchemeGroupVersion.WithResource("applications")).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to read Application %s/%s: %w", ns, name, err)
	}
	app := &v1alpha1.Application{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, app); err != nil {
		return nil, fmt.Errorf("Application %s/%s: %w", ns, name, err)
	}
	return app, nil
}

// renderOptions are the source cache's options: --config's sync section,
// then the flags.
func renderOptions(f *renderFlags) (source.Options, error) {
	cfg := config.Sync{}
	if f.configFile != "" {
		full, err := loadConfigFile(f.configFile)
		if err != nil {
			return source.Options{}, err
		}
		cfg = full.Sync
	}
	// Zero limits take the engine's defaults (source.New).
	opts := serve.SourceOptions(cfg, nil)
	opts.CacheDir = f.cacheDir
	for _, d := range f.localRepos {
		abs, err := filepath.Abs(d)
		if err != nil {
			return source.Options{}, fmt.Errorf("--local-repos %s: %w", d, err)
		}
		opts.LocalRepositories = append(opts.LocalRepositories, abs)
	}
	return opts, nil
}

// runRender renders app with the engine's RenderApplication and prints the
// objects.
func runRender(ctx context.Context, f *renderFlags, app *v1alpha1.Application, out io.Writer) error {
	if f.output != "yaml" && f.output != "json" {
		return fmt.Errorf("-o %s: use yaml or json", f.output)
	}
	opts, err := renderOptions(f)
	if err != nil {
		return err
	}
	if f.cacheDir == "" {
		tmp, err := os.MkdirTemp("", "deputy-render-cache-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		opts.CacheDir = tmp
	}
	cache, err := source.New(opts)
	if err != nil {
		return err
	}
	app = withCapabilities(app, f.kubeVersion, f.apiVersions)
	sync := v1alpha1.SyncOperation{}
	switch {
	case len(f.revisions) == 0:
	case app.Spec.HasMultipleSources():
		sync.Revisions = f.revisions
	case len(f.revisions) == 1:
		sync.Revision = f.revisions[0]
	default:
		return fmt.Errorf("--revision given %d times, but the Application has one source (spec.source): give it once", len(f.revisions))
	}
	ctx, cancel := context.WithTimeout(ctx, cache.Limits().OperationTimeout)
	defer cancel()
	r, err := source.RenderApplication(ctx, cache, app, sync)
	if err != nil {
		return err
	}
	return writeObjects(out, f.output, r.Objects)
}

// withCapabilities is a copy of app whose every source renders Helm with
// kubeVersion and apiVersions, when given.
func withCapabilities(app *v1alpha1.Application, kubeVersion string, apiVersions []string) *v1alpha1.Application {
	if kubeVersion == "" && len(apiVersions) == 0 {
		return app
	}
	app = app.DeepCopy()
	set := func(src *v1alpha1.ApplicationSource) {
		if src.Helm == nil {
			src.Helm = &v1alpha1.HelmSource{}
		}
		if kubeVersion != "" {
			src.Helm.KubeVersion = kubeVersion
		}
		if len(apiVersions) > 0 {
			src.Helm.APIVersions = apiVersions
		}
	}
	if app.Spec.HasMultipleSources() {
		for i := range app.Spec.Sources {
			set(&app.Spec.Sources[i])
		}
	} else {
		set(&app.Spec.Source)
	}
	return app
}

// writeObjects prints objs as YAML documents or as a v1 List in JSON.
func writeObjects(out io.Writer, format string, objs []*unstructured.Unstructured) error {
	if format == "json" {
		items := make([]map[string]any, 0, len(objs))
		for _, o := range objs {
			items = append(items, o.Object)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}); err != nil {
			return err
		}
		_, err := out.Write(b.Bytes())
		return err
	}
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return fmt.Errorf("failed to encode %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if _, err := fmt.Fprintf(out, "---\n%s", data); err != nil {
			return err
		}
	}
	return nil
}

package source

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// FieldKustomizeRemoteResources is the configuration field that allows
// kustomize to load remote content; refusals name it.
const FieldKustomizeRemoteResources = "sync.kustomize.remoteResources"

// DefaultKustomizeRemoteTimeout bounds one remote request of kustomize when
// remote resources are on and KustomizeOptions.RemoteTimeout is zero.
const DefaultKustomizeRemoteTimeout = 30 * time.Second

// maxKustomizationDepth bounds how deeply kustomizations may reference one
// another (kustomize refuses cycles; this bounds the walk before it runs).
const maxKustomizationDepth = 64

// KustomizeOptions configure kustomize builds. Exec and KRM function
// plugins and Helm are off whatever these say.
type KustomizeOptions struct {
	// RemoteResources lets kustomizations load remote content: http(s)://
	// files with Go's default HTTP client (bounded by RemoteTimeout per
	// request and Limits.MaxFileBytes per response), and Git bases over
	// http(s) with the git binary (kustomize's own cloner). When false (the
	// default) every reference that is not a file or directory inside the
	// repository fails the render before kustomize runs, naming
	// sync.kustomize.remoteResources. The render worker that runs the build
	// sets process-wide state either way (configureKustomizeRemote):
	// http.DefaultTransport is wrapped (off: it refuses every request, a
	// backstop behind the reference check) and git's environment restricted
	// (off: no protocol).
	RemoteResources bool
	// RemoteTimeout bounds one remote request (an HTTP request; for git, the
	// low-speed timeout). Default DefaultKustomizeRemoteTimeout.
	RemoteTimeout time.Duration
}

// kustomizeOptions are krusty's options for every build: kustomize's
// defaults, stated rather than assumed: loads restricted to the
// kustomization's root, only builtin plugins (no exec or KRM function
// plugins), Helm off.
func kustomizeOptions() *krusty.Options {
	o := krusty.MakeDefaultOptions()
	o.LoadRestrictions = types.LoadRestrictionsRootOnly
	o.PluginConfig = types.DisabledPluginConfig()
	o.PluginConfig.HelmConfig = types.HelmConfig{Enabled: false}
	return o
}

// kustomizeBuild checks every reference reachable from the kustomization in
// dir (repository-relative), runs `kustomize build` over gfs and passes each
// resulting object, as JSON, to emit. It runs only in a render worker
// (render_worker.go), never in deputy's own process: what kustomize
// allocates depends on what the repository holds (kyaml expands YAML
// aliases, a patch is copied into every object it targets) and kustomize has
// no bound or hook to stop a build. gfs fails every read after the
// operation's context ended.
func kustomizeBuild(gfs *gitFS, dir string, opts KustomizeOptions, emit func(json []byte) error) (err error) {
	w := &refWalker{fs: gfs, remote: opts.RemoteResources, seen: map[string]bool{}}
	if err := w.kustomization(dir, false, 0); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("kustomize failed unexpectedly: %v", r)
		}
	}()
	resMap, err := krusty.MakeKustomizer(kustomizeOptions()).Run(gfs, path.Join(gitMount, dir))
	if err != nil {
		if cerr := gfs.budget.ctx.Err(); cerr != nil {
			return cerr
		}
		// kustomize turns the errors of its reads into strings: a limit a
		// read exceeded is returned as itself.
		if lerr := gfs.budget.err(); lerr != nil {
			return lerr
		}
		return err
	}
	if err := gfs.budget.objects(resMap.Size()); err != nil {
		return err
	}
	for _, r := range resMap.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			return fmt.Errorf("failed to encode %s: %w", r.CurId(), err)
		}
		if err := emit(data); err != nil {
			return err
		}
	}
	return nil
}

// refWalker checks the references of kustomizations before kustomize runs:
// kustomize's loader fetches http(s) paths with its own HTTP client and
// clones anything its Git URL parser accepts with the git binary, and it
// has no option to refuse either. Every reference must be a file or
// directory inside the repository (through gitFS: symbolic links resolved
// inside it), unless remote resources are on and the reference is an
// http(s) one.
type refWalker struct {
	fs     *gitFS
	remote bool
	seen   map[string]bool
}

// refKind is what a reference must be.
type refKind int

const (
	refAny refKind = iota
	refFile
	refDir
)

// refuseSuffix ends every refusal: what is loaded, and the setting.
const refuseSuffix = "kustomize may load only files and directories inside the repository unless the operator sets " + FieldKustomizeRemoteResources

// kustomization checks the kustomization in dir; configs says its
// resources are plugin configurations (it was named by generators,
// transformers or validators).
func (w *refWalker) kustomization(dir string, configs bool, depth int) error {
	if depth > maxKustomizationDepth {
		return fmt.Errorf("kustomization %s: more than %d levels of kustomizations referencing one another", displayPath(dir), maxKustomizationDepth)
	}
	key := fmt.Sprintf("%s|%t", dir, configs)
	if w.seen[key] {
		return nil
	}
	w.seen[key] = true
	file := ""
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if n, err := w.fs.resolve(path.Join(dir, name)); err == nil && !n.isDir() {
			file = path.Join(dir, name)
			break
		}
	}
	if file == "" {
		return nil // kustomize reports a directory without a kustomization
	}
	data, err := w.fs.ReadFile(path.Join(gitMount, file))
	if err != nil {
		return err
	}
	var k types.Kustomization
	if err := k.Unmarshal(data); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	k.FixKustomization()

	if len(k.HelmCharts) > 0 || len(k.HelmChartInflationGenerator) > 0 || k.HelmGlobals != nil {
		return fmt.Errorf("%s: helmCharts: %w", file, ErrHelm)
	}
	check := func(field, ref string, want refKind) (*node, error) {
		return w.ref(file, field, dir, ref, want)
	}
	for i, r := range k.Resources {
		field := fmt.Sprintf("resources[%d]", i)
		n, err := check(field, r, refAny)
		if err != nil {
			return err
		}
		if err := w.followResource(file, field, n, configs, depth); err != nil {
			return err
		}
	}
	for i, r := range k.Components {
		n, err := check(fmt.Sprintf("components[%d]", i), r, refDir)
		if err != nil {
			return err
		}
		if n != nil {
			if err := w.kustomization(n.rel, configs, depth+1); err != nil {
				return err
			}
		}
	}
	for field, refs := range map[string][]string{"crds": k.Crds, "configurations": k.Configurations} {
		for i, r := range refs {
			if _, err := check(fmt.Sprintf("%s[%d]", field, i), r, refFile); err != nil {
				return err
			}
		}
	}
	for field, refs := range map[string][]string{"generators": k.Generators, "transformers": k.Transformers, "validators": k.Validators} {
		for i, r := range refs {
			if err := w.pluginEntry(file, fmt.Sprintf("%s[%d]", field, i), dir, r, depth); err != nil {
				return err
			}
		}
	}
	for i, p := range k.Patches {
		if p.Path != "" {
			if _, err := check(fmt.Sprintf("patches[%d].path", i), p.Path, refFile); err != nil {
				return err
			}
		}
	}
	for i, p := range k.PatchesJson6902 {
		if p.Path != "" {
			if _, err := check(fmt.Sprintf("patchesJson6902[%d].path", i), p.Path, refFile); err != nil {
				return err
			}
		}
	}
	for i, p := range k.PatchesStrategicMerge {
		if !inlineObject(string(p)) {
			if _, err := check(fmt.Sprintf("patchesStrategicMerge[%d]", i), string(p), refFile); err != nil {
				return err
			}
		}
	}
	for i, r := range k.Replacements {
		if r.Path != "" {
			if _, err := check(fmt.Sprintf("replacements[%d].path", i), r.Path, refFile); err != nil {
				return err
			}
		}
	}
	if p, ok := k.OpenAPI["path"]; ok {
		if _, err := check("openapi.path", p, refFile); err != nil {
			return err
		}
	}
	for i, a := range k.ConfigMapGenerator {
		if err := w.generatorSources(file, fmt.Sprintf("configMapGenerator[%d]", i), dir, a.KvPairSources); err != nil {
			return err
		}
	}
	for i, a := range k.SecretGenerator {
		if err := w.generatorSources(file, fmt.Sprintf("secretGenerator[%d]", i), dir, a.KvPairSources); err != nil {
			return err
		}
	}
	return nil
}

// followResource descends into a resource that is a directory (a
// kustomization), and checks a resource file of a configs kustomization as
// a plugin configuration.
func (w *refWalker) followResource(file, field string, n *node, configs bool, depth int) error {
	switch {
	case n == nil: // an allowed remote reference
		return nil
	case n.isDir():
		return w.kustomization(n.rel, configs, depth+1)
	case configs:
		data, err := w.fs.ReadFile(path.Join(gitMount, n.rel))
		if err != nil {
			return err
		}
		// The configuration's relative paths resolve against a loader this
		// walk cannot name reliably: only remote references are checked.
		return w.pluginConfig(n.rel, "", "", data)
	}
	return nil
}

// generatorSources checks the files, envs and env of a ConfigMap or Secret
// generator: each must be a file inside the repository.
func (w *refWalker) generatorSources(file, field, dir string, s types.KvPairSources) error {
	for i, f := range s.FileSources {
		if err := w.fileSource(file, fmt.Sprintf("%s.files[%d]", field, i), dir, f); err != nil {
			return err
		}
	}
	envs := append([]string(nil), s.EnvSources...)
	if s.EnvSource != "" {
		envs = append(envs, s.EnvSource)
	}
	for i, e := range envs {
		if _, err := w.ref(file, fmt.Sprintf("%s.envs[%d]", field, i), dir, e, refFile); err != nil {
			return err
		}
	}
	return nil
}

// fileSource checks a generator's files entry, "[key=]path" (kustomize's
// ParseFileSource, internal to it): every '='-separated part is checked for
// a remote reference, then the path part must be a file (an entry kustomize
// cannot parse is left to kustomize to refuse). With base "" only remote
// references are checked.
func (w *refWalker) fileSource(file, field, base, entry string) error {
	parts := strings.Split(entry, "=")
	for _, part := range parts {
		if looksRemote(part) || path.IsAbs(part) {
			if _, err := w.ref(file, field, base, part, refFile); err != nil {
				return err
			}
		}
	}
	p := ""
	switch {
	case len(parts) == 1:
		p = entry
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		p = parts[1]
	}
	if p == "" || base == "" {
		return nil
	}
	_, err := w.ref(file, field, base, p, refFile)
	return err
}

// pluginEntry checks one generators/transformers/validators entry: an
// inline configuration (kustomize tries that first), or a file holding
// configurations, or a directory whose kustomization's resources are
// configurations. Paths inside a configuration resolve against dir, the
// listing kustomization's directory (kustomize loads plugins with its
// loader).
func (w *refWalker) pluginEntry(file, field, dir, entry string, depth int) error {
	if inlineObject(entry) {
		return w.pluginConfig(file, field, dir, []byte(entry))
	}
	n, err := w.ref(file, field, dir, entry, refAny)
	if err != nil || n == nil {
		return err
	}
	if n.isDir() {
		return w.kustomization(n.rel, true, depth+1)
	}
	data, err := w.fs.ReadFile(path.Join(gitMount, n.rel))
	if err != nil {
		return err
	}
	return w.pluginConfig(n.rel, "", dir, data)
}

// pathKeys are the keys of builtin plugin configurations that name files
// (PatchTransformer path, PatchStrategicMergeTransformer paths,
// ConfigMapGenerator/SecretGenerator files, envs and env,
// ReplacementTransformer replacements[].path, ...).
var pathKeys = map[string]bool{"path": true, "paths": true, "files": true, "envs": true, "env": true}

// fileKinds are the builtin configurations whose path keys name files that
// must exist (elsewhere, e.g. in a LabelTransformer's fieldSpecs, "path" is
// a field path, not a file).
var fileKinds = map[string]bool{
	"PatchTransformer": true, "PatchJson6902Transformer": true, "PatchStrategicMergeTransformer": true,
	"ConfigMapGenerator": true, "SecretGenerator": true, "ReplacementTransformer": true,
}

// pluginConfig checks plugin configurations (YAML documents) from file
// (field, when inline): every string under a path, paths, files, envs or
// env key, at any depth, must not be a remote reference or an absolute path
// (unless remote resources are on and it is http(s)); in builtin kinds that
// load files, the local ones must be files inside the repository, relative
// to base (not checked when base is "").
func (w *refWalker) pluginConfig(file, field, base string, data []byte) error {
	docs, err := yamlDocuments(data)
	if err != nil {
		return nil // kustomize reports a configuration that does not parse
	}
	where := field
	for _, doc := range docs {
		kind, _ := doc["kind"].(string)
		if strings.HasPrefix(kind, "HelmChart") {
			return fmt.Errorf("%s: %s: %w", file, cmp.Or(where, "kind "+kind), ErrHelm)
		}
		checkBase := ""
		if fileKinds[kind] {
			checkBase = base
		}
		var visit func(v any, key, at string) error
		visit = func(v any, key, at string) error {
			switch t := v.(type) {
			case map[string]any:
				for k, child := range t {
					if err := visit(child, k, at+"."+k); err != nil {
						return err
					}
				}
			case []any:
				for i, child := range t {
					if err := visit(child, key, fmt.Sprintf("%s[%d]", at, i)); err != nil {
						return err
					}
				}
			case string:
				name := strings.TrimPrefix(where+at, ".")
				switch {
				case !pathKeys[key]:
				case key == "files":
					return w.fileSource(file, name, checkBase, t)
				case key == "paths" && inlineObject(t):
				case looksRemote(t) || path.IsAbs(t) || checkBase != "":
					_, err := w.ref(file, name, checkBase, t, refFile)
					return err
				}
			}
			return nil
		}
		if err := visit(doc, "", ""); err != nil {
			return err
		}
	}
	return nil
}

// ref checks one reference, relative to the repository directory base, and
// returns what it resolves to (nil for a remote reference remote resources
// allow). Errors name the kustomization file, the field and
// sync.kustomize.remoteResources.
func (w *refWalker) ref(file, field, base, ref string, want refKind) (*node, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%s: %s: %s: %s", file, field, fmt.Sprintf(format, a...), refuseSuffix)
	}
	if looksRemote(ref) {
		if !w.remote {
			return nil, fail("%q is remote content, which is off", ref)
		}
		if !remoteAllowed(ref) {
			return nil, fail("%q is not an http(s) reference: with remote resources on, only https:// and http:// (and github.com/ORG/REPO, fetched over https) are loaded", ref)
		}
		return nil, nil
	}
	if ref == "" {
		return nil, fail("the reference is empty")
	}
	if path.IsAbs(ref) || strings.HasPrefix(ref, `\`) {
		return nil, fail("%q is an absolute path", ref)
	}
	rel := path.Join(base, ref)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fail("%q leaves the repository", ref)
	}
	n, err := w.fs.resolve(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fail("%q does not exist in the repository", ref)
		}
		if isLimitError(err) {
			return nil, err
		}
		return nil, fail("%q: %v", ref, err)
	}
	switch {
	case want == refFile && n.isDir():
		return nil, fail("%q is a directory, not a file", ref)
	case want == refDir && !n.isDir():
		return nil, fail("%q is a file, not a directory", ref)
	}
	return n, nil
}

// userPrefix is kustomize's username form of a Git URL (git@host:...).
var userPrefix = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*@`)

// looksRemote reports whether kustomize could treat ref as remote: its
// loader fetches what net/url parses with an http(s) scheme, and clones what
// its Git URL parser accepts (internal/git NewRepoSpecFromURL: an optional
// "git::" prefix, then ssh://, https://, http://, file://, a user@ prefix,
// or github.com/ or github.com:). Any other "scheme://" is counted as
// remote too: it can never be a file in the repository.
func looksRemote(ref string) bool {
	s := strings.ToLower(strings.TrimSpace(ref))
	s = strings.TrimPrefix(s, "git::")
	if strings.Contains(s, "://") || userPrefix.MatchString(strings.TrimPrefix(strings.TrimSpace(ref), "git::")) ||
		strings.HasPrefix(s, "github.com/") || strings.HasPrefix(s, "github.com:") {
		return true
	}
	if u, err := url.Parse(strings.TrimSpace(ref)); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		return true
	}
	return false
}

// remoteAllowed reports whether a remote reference is one remote resources
// allow: http(s) URLs, and github.com/ORG/REPO without a user (kustomize
// fetches those over https). ssh, file and user@host forms stay refused:
// they would use deputy's own keys or read its own files.
func remoteAllowed(ref string) bool {
	s := strings.ToLower(strings.TrimSpace(ref))
	s = strings.TrimPrefix(s, "git::")
	return strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "github.com/")
}

// inlineObject reports whether s is an inline object (kustomize tries an
// entry as inline YAML before as a path): a YAML mapping with a kind or an
// apiVersion.
func inlineObject(s string) bool {
	docs, err := yamlDocuments([]byte(s))
	if err != nil || len(docs) == 0 {
		return false
	}
	for _, d := range docs {
		if d["kind"] == nil && d["apiVersion"] == nil {
			return false
		}
	}
	return true
}

// yamlDocuments decodes the mappings of a multi-document YAML stream.
func yamlDocuments(data []byte) ([]map[string]any, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		if m != nil {
			out = append(out, m)
		}
	}
}

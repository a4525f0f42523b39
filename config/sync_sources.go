package config

import (
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SyncSources are the settings that bound what an Application's source may
// make deputy read: which local repositories it may open, whether kustomize
// may load remote content, and the limits of one operation. Everything a
// tenant writes (the Application, the repository's content) is hostile; these
// settings are the operator's.
type SyncSources struct {
	// LocalRepositories are absolute directories under which local
	// repositories (file:// URLs and absolute paths) may be opened; every
	// file access of such a repository (symbolic links, .git files naming a
	// gitdir, commondir, objects/info/alternates) stays inside the listed
	// directory. Empty (the default): every local repository URL is refused
	// and the operation fails naming sync.localRepositories. Relative paths
	// (./, ../) are always refused. A directory that is, contains or is
	// inside cacheDir, the TLS files, the policy paths, a credential file or
	// /var/run/secrets is refused at validation.
	LocalRepositories []string `json:"localRepositories,omitempty"`
	// Kustomize configures kustomize builds.
	Kustomize SyncKustomize `json:"kustomize,omitempty"`
	// Limits bound one operation.
	Limits SyncLimits `json:"limits,omitempty"`
}

// SyncKustomize configures kustomize builds. Exec and KRM function plugins
// and Helm stay off whatever these say.
type SyncKustomize struct {
	// RemoteResources lets kustomizations load remote content (http(s)://
	// files and Git bases over https). Default false: any remote reference
	// (http(s)://, github.com/org/repo, git@…, ssh://, file://) fails the
	// render, naming sync.kustomize.remoteResources, before any request is
	// made. See docs/configuration.md for what turning it on gives up.
	RemoteResources bool `json:"remoteResources,omitempty"`
	// RemoteTimeout bounds one remote request when RemoteResources is on.
	// Default 30s.
	RemoteTimeout metav1.Duration `json:"remoteTimeout,omitempty"`
}

// SyncLimits bound one operation. Each default is far above what a real
// application needs; exceeding one fails the operation with a message naming
// the field (e.g. sync.limits.maxFileBytes).
type SyncLimits struct {
	// MaxFileBytes bounds one file read from a repository (a manifest, a
	// kustomize input) and one object received by a fetch (go-git holds each
	// fetched object in memory while indexing the pack). Default 32Mi.
	MaxFileBytes resource.Quantity `json:"maxFileBytes,omitempty"`
	// MaxRenderBytes bounds all bytes one render reads, and the size of the
	// objects it produces as deputy holds them in memory (estimated from
	// their JSON: its bytes plus 48 per value). Default 256Mi.
	MaxRenderBytes resource.Quantity `json:"maxRenderBytes,omitempty"`
	// MaxFiles bounds the files one render reads. Default 20000.
	MaxFiles int `json:"maxFiles,omitempty"`
	// MaxObjects bounds the objects one render produces. Default 10000.
	MaxObjects int `json:"maxObjects,omitempty"`
	// MaxRenderMemory bounds the memory of one render: every render
	// (kustomize build or plain manifests) runs in a render worker, a child
	// process of deputy that is stopped when its Go memory exceeds this, and
	// the operation fails naming this field. At least 64Mi and at least
	// maxRenderBytes (the worker holds the objects it produces). Default
	// 1Gi.
	MaxRenderMemory resource.Quantity `json:"maxRenderMemory,omitempty"`
	// MaxFetchBytes bounds the bytes received from a Git server by one fetch,
	// and the total size of the objects in it. Default 2Gi.
	MaxFetchBytes resource.Quantity `json:"maxFetchBytes,omitempty"`
	// MaxFetchObjects bounds the objects one fetch receives (a pack declares
	// its count before its objects): go-git's pack indexer holds about
	// 0.5 KiB of deputy's memory per object until the fetch ends. Default
	// 500000.
	MaxFetchObjects int `json:"maxFetchObjects,omitempty"`
	// OperationTimeout bounds one operation, from fetch to prune. Default 30m.
	OperationTimeout metav1.Duration `json:"operationTimeout,omitempty"`
}

// Defaults of SyncSources.
const (
	DefaultKustomizeRemoteTimeout = 30 * time.Second
	DefaultMaxFiles               = 20000
	DefaultMaxObjects             = 10000
	DefaultMaxFetchObjects        = 500000
	DefaultOperationTimeout       = 30 * time.Minute
)

// Default byte limits, as resource.Quantity strings.
var (
	DefaultMaxFileBytes   = resource.MustParse("32Mi")
	DefaultMaxRenderBytes = resource.MustParse("256Mi")
	DefaultMaxFetchBytes  = resource.MustParse("2Gi")
	// DefaultMaxRenderMemory is far above what a large real application
	// needs (3,000 Deployments and 30 large CRDs through kustomize peaked at
	// 380 MB: docs/benchmarks.md).
	DefaultMaxRenderMemory = resource.MustParse("1Gi")
)

// secretsDirs hold the Pod's ServiceAccount token and other projected
// secrets (/var/run is a link to /run on most distributions).
var secretsDirs = []string{"/var/run/secrets", "/run/secrets"}

// SetSyncSourcesDefaults fills remoteTimeout and the limits.
func SetSyncSourcesDefaults(s *SyncSources) {
	if s.Kustomize.RemoteTimeout.Duration == 0 {
		s.Kustomize.RemoteTimeout.Duration = DefaultKustomizeRemoteTimeout
	}
	l := &s.Limits
	if l.MaxFileBytes.IsZero() {
		l.MaxFileBytes = DefaultMaxFileBytes.DeepCopy()
	}
	if l.MaxRenderBytes.IsZero() {
		l.MaxRenderBytes = DefaultMaxRenderBytes.DeepCopy()
	}
	if l.MaxFiles == 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.MaxObjects == 0 {
		l.MaxObjects = DefaultMaxObjects
	}
	if l.MaxRenderMemory.IsZero() {
		l.MaxRenderMemory = DefaultMaxRenderMemory.DeepCopy()
	}
	if l.MaxFetchBytes.IsZero() {
		l.MaxFetchBytes = DefaultMaxFetchBytes.DeepCopy()
	}
	if l.MaxFetchObjects == 0 {
		l.MaxFetchObjects = DefaultMaxFetchObjects
	}
	if l.OperationTimeout.Duration == 0 {
		l.OperationTimeout.Duration = DefaultOperationTimeout
	}
}

// validateSyncSources checks localRepositories (against every path of c that
// holds deputy's own secrets or state), the kustomize settings, the limits,
// and the credential URLs of sync.repositories (item 3 of the matching rule:
// they must parse as http(s) URLs without user info, query or dot segments).
func validateSyncSources(c *DeputyConfiguration, fld *field.Path) field.ErrorList {
	s := &c.Sync
	var errs field.ErrorList
	protected := protectedPaths(c)
	for i, dir := range s.LocalRepositories {
		f := fld.Child("localRepositories").Index(i)
		if !filepath.IsAbs(dir) {
			errs = append(errs, field.Invalid(f, dir, "must be an absolute directory, e.g. /srv/git"))
			continue
		}
		for _, p := range protected {
			if overlaps(dir, p.path) {
				errs = append(errs, field.Invalid(f, dir, fmt.Sprintf("overlaps %s (%s): list a directory that holds only Git repositories, outside deputy's cache, keys, certificates, credentials and ServiceAccount token", p.field, p.path)))
				break
			}
		}
	}

	kf := fld.Child("kustomize")
	if d := s.Kustomize.RemoteTimeout.Duration; d < time.Second {
		errs = append(errs, field.Invalid(kf.Child("remoteTimeout"), d.String(), "must be at least 1s, e.g. 30s"))
	}

	lf := fld.Child("limits")
	l := s.Limits
	fileBytes := validBytes(&errs, lf.Child("maxFileBytes"), l.MaxFileBytes, 1024)
	renderBytes := validBytes(&errs, lf.Child("maxRenderBytes"), l.MaxRenderBytes, 1024)
	validBytes(&errs, lf.Child("maxFetchBytes"), l.MaxFetchBytes, 1<<20)
	if fileBytes > 0 && renderBytes > 0 && fileBytes > renderBytes {
		errs = append(errs, field.Invalid(lf.Child("maxFileBytes"), l.MaxFileBytes.String(), "must not be more than maxRenderBytes ("+l.MaxRenderBytes.String()+")"))
	}
	if renderMemory := validBytes(&errs, lf.Child("maxRenderMemory"), l.MaxRenderMemory, 64<<20); renderMemory > 0 && renderBytes > 0 && renderMemory < renderBytes {
		errs = append(errs, field.Invalid(lf.Child("maxRenderMemory"), l.MaxRenderMemory.String(), "must not be less than maxRenderBytes ("+l.MaxRenderBytes.String()+"): the render worker holds the objects it produces"))
	}
	if l.MaxFetchObjects < 1 {
		errs = append(errs, field.Invalid(lf.Child("maxFetchObjects"), l.MaxFetchObjects, "must be positive, e.g. 500000"))
	}
	if l.MaxFiles < 1 {
		errs = append(errs, field.Invalid(lf.Child("maxFiles"), l.MaxFiles, "must be positive, e.g. 20000"))
	}
	if l.MaxObjects < 1 {
		errs = append(errs, field.Invalid(lf.Child("maxObjects"), l.MaxObjects, "must be positive, e.g. 10000"))
	}
	if d := l.OperationTimeout.Duration; d < 10*time.Second {
		errs = append(errs, field.Invalid(lf.Child("operationTimeout"), d.String(), "must be at least 10s, e.g. 30m"))
	}

	for i, r := range s.Repositories {
		if r.URL == "" {
			continue // validateSync reports it
		}
		if msg := credentialURLProblem(r.URL); msg != "" {
			errs = append(errs, field.Invalid(fld.Child("repositories").Index(i).Child("url"), r.URL, msg))
		}
	}
	return errs
}

// validBytes reports a byte quantity that is not a whole number of at least
// min bytes, and returns its value (0 when invalid).
func validBytes(errs *field.ErrorList, f *field.Path, q resource.Quantity, min int64) int64 {
	v, ok := q.AsInt64()
	if !ok || v < min {
		*errs = append(*errs, field.Invalid(f, q.String(), fmt.Sprintf("must be a whole number of bytes, at least %s", resource.NewQuantity(min, resource.BinarySI))))
		return 0
	}
	return v
}

// credentialURLProblem says why u cannot be a repository credential URL, or
// "" when it can. The syncer matches credentials by scheme, host and port
// exactly and then by path on '/' boundaries; a URL that carries user info,
// a query, a fragment or dot segments has no single reading, so it is
// refused rather than guessed at.
func credentialURLProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "must be an https:// URL (a repository or a path prefix), e.g. https://git.example.com/team-a, or oci://HOST/PATH for an OCI registry"
	case u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "oci":
		return "must be an https:// (or http:// on loopback) URL, or oci://HOST/PATH for an OCI registry: credentials are sent only over HTTP(S)"
	case u.Host == "" || u.Hostname() == "":
		return "must name a host, e.g. https://git.example.com/team-a"
	case u.User != nil:
		return "must not carry user info: put the username in usernameFile or the Secret"
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "must not have a query or fragment"
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return "must not contain . or .. path segments"
		}
	}
	if strings.Contains(u.Path, "\\") {
		return "must not contain backslashes"
	}
	return ""
}

type protectedPath struct{ field, path string }

// protectedPaths are the files and directories holding deputy's own state
// and secrets: no local repository directory may overlap one.
func protectedPaths(c *DeputyConfiguration) []protectedPath {
	var out []protectedPath
	add := func(f, p string) {
		if strings.TrimSpace(p) == "" {
			return
		}
		if abs, err := filepath.Abs(p); err == nil {
			out = append(out, protectedPath{f, abs})
		}
	}
	add("sync.cacheDir", c.Sync.CacheDir)
	add("tls.certDir", c.TLS.CertDir)
	add("tls.certFile", c.TLS.CertFile)
	add("tls.keyFile", c.TLS.KeyFile)
	add("tls.clientCAFile", c.TLS.ClientCAFile)
	if c.API.RequestHeader != nil {
		add("api.requestHeader.clientCAFile", c.API.RequestHeader.ClientCAFile)
	}
	for i, j := range c.Authentication.JWT {
		add(fmt.Sprintf("authentication.jwt[%d].certificateAuthorityFile", i), j.CertificateAuthorityFile)
	}
	pt := c.Authentication.ProjectTokens
	add("authentication.projectTokens.signingKeyFile", pt.SigningKeyFile)
	for i, f := range pt.VerificationKeyFiles {
		add(fmt.Sprintf("authentication.projectTokens.verificationKeyFiles[%d]", i), f)
	}
	add("authentication.projectTokens.revocationFile", pt.RevocationFile)
	for i, p := range c.Policy.Paths {
		add(fmt.Sprintf("policy.paths[%d]", i), p)
	}
	for i, r := range c.Sync.Repositories {
		add(fmt.Sprintf("sync.repositories[%d].usernameFile", i), r.UsernameFile)
		add(fmt.Sprintf("sync.repositories[%d].passwordFile", i), r.PasswordFile)
	}
	for i, cl := range c.Sync.Clusters {
		add(fmt.Sprintf("sync.clusters[%d].kubeconfig", i), cl.Kubeconfig)
	}
	add("cluster.kubeconfig", c.Cluster.Kubeconfig)
	add("sync.webhook.githubSecretFile", c.Sync.Webhook.GitHubSecretFile)
	add("sync.webhook.gitlabSecretFile", c.Sync.Webhook.GitLabSecretFile)
	add("sync.webhook.tokenFile", c.Sync.Webhook.TokenFile)
	for _, d := range secretsDirs {
		add("the Pod's secrets", d)
	}
	return out
}

// overlaps reports whether a and b are the same path or one contains the
// other, lexically and after resolving symbolic links (where they exist).
func overlaps(a, b string) bool {
	if within(a, b) || within(b, a) {
		return true
	}
	ra, rb := resolved(a), resolved(b)
	return within(ra, rb) || within(rb, ra)
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	if p == dir || dir == string(filepath.Separator) {
		return true
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// resolved is p with symbolic links resolved in its longest existing prefix.
func resolved(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for cur := p; ; cur = filepath.Dir(cur) {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		if cur == filepath.Dir(cur) {
			return p
		}
		rest = path.Join(filepath.Base(cur), rest)
	}
}

package config

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// APIVersion and Kind identify the configuration file.
const (
	APIVersion = "config.deputy.dev/v1alpha1"
	Kind       = "DeputyConfiguration"
)

// DeputyConfiguration is the whole configuration of `deputy serve`.
type DeputyConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// Listen is the HOST:PORT the HTTPS server binds. Default 127.0.0.1:8443.
	Listen string `json:"listen,omitempty"`
	// TLS configures serving and client certificates.
	TLS TLS `json:"tls,omitempty"`
	// Policy configures where RBAC objects, AppProjects and tokens come from.
	Policy Policy `json:"policy,omitempty"`
	// Authorization configures SubjectAccessReview answers.
	Authorization Authorization `json:"authorization,omitempty"`
	// Authentication configures TokenReview answers.
	Authentication Authentication `json:"authentication,omitempty"`
	// Shutdown configures how SIGTERM is handled.
	Shutdown Shutdown `json:"shutdown,omitempty"`
	// Logging configures the log output.
	Logging Logging `json:"logging,omitempty"`
	// API configures authentication and authorization of deputy's own API.
	API API `json:"api,omitempty"`
	// Cluster connects deputy to the cluster it guards (cluster mode):
	// AppProjects and RBAC objects are then read through informers.
	Cluster Cluster `json:"cluster,omitempty"`
	// Sync configures deputy's sync engine: impersonation, the clusters it
	// syncs to, repository credentials, its cache and its parallelism.
	Sync Sync `json:"sync,omitempty"`
}

// Sync configures the sync engine and its operations queue.
type Sync struct {
	// Impersonation says whether syncs impersonate the ServiceAccount their
	// AppProject derives (Argo CD's application.sync.impersonation settings).
	Impersonation SyncImpersonation `json:"impersonation,omitempty"`
	// Clusters is the cluster registry: the clusters Applications may name
	// as destination (by server URL or by name) and how deputy connects to
	// each. Default: none in file mode; in cluster mode the cluster deputy
	// reads, as "in-cluster" at https://kubernetes.default.svc.
	Clusters []SyncCluster `json:"clusters,omitempty"`
	// Repositories are credentials for Git repositories: one applies when
	// its URL's scheme, host and port equal the Application's repoURL's and
	// the repoURL's path is its path or below it on a '/' boundary; the
	// longest path wins (docs/configuration.md).
	Repositories []RepositoryCredentials `json:"repositories,omitempty"`
	// CacheDir holds the Git clones. Default .deputy/repos.
	CacheDir string `json:"cacheDir,omitempty"`
	// Parallelism is how many operations (of different Applications) run at
	// once; more wait their turn. It also bounds, apart, the diffs one
	// process computes at once (more are refused: 429). Default 8.
	Parallelism int `json:"parallelism,omitempty"`
	// ApplicationNamespaces are the namespaces whose Applications deputy
	// reconciles in cluster mode; empty means every namespace.
	ApplicationNamespaces []string `json:"applicationNamespaces,omitempty"`
	// HealthTimeout bounds how long an operation waits for the resources of
	// one wave to become healthy (hooks: to complete) when neither the
	// operation nor the Application's spec.syncPolicy.healthTimeout sets
	// one; the operation then fails naming the resources that were not
	// healthy. Default 5m; at most limits.operationTimeout.
	HealthTimeout metav1.Duration `json:"healthTimeout,omitempty"`
	// ReconcilePeriod is how often (cluster mode) the leader looks at every
	// automated Application: it syncs when Git moved, and always when
	// selfHeal is set. Default 3m, as Argo CD's timeout.reconciliation.
	ReconcilePeriod metav1.Duration `json:"reconcilePeriod,omitempty"`
	// LeaderElection configures the Lease that decides which replica runs
	// operations in cluster mode (every replica serves the webhooks).
	LeaderElection LeaderElection `json:"leaderElection,omitempty"`
	// Webhook configures the Git push webhook POST /api/webhook.
	Webhook GitWebhook `json:"webhook,omitempty"`
	// ProjectNamespaces are where the AppProjects of deputy's Applications
	// live (Argo CD's control-plane namespace). Default: deputy's own
	// namespace (OwnNamespace). An Application outside them may use a project
	// only when the project's spec.sourceNamespaces admits its namespace.
	// ["*"] makes every namespace a project namespace (whoever may write an
	// AppProject anywhere then decides what its Applications may do).
	ProjectNamespaces []string `json:"projectNamespaces,omitempty"`
	// SyncSources (localRepositories, kustomize, limits) bound what an
	// Application's source may make deputy read.
	SyncSources `json:",inline"`
}

// SyncImpersonation are Argo CD's impersonation settings.
type SyncImpersonation struct {
	// Enabled makes every sync impersonate the ServiceAccount its AppProject
	// derives (destinationServiceAccounts). Default false, as in Argo CD.
	Enabled bool `json:"enabled,omitempty"`
	// Enforced (default true): with impersonation enabled, a destination no
	// destinationServiceAccounts entry matches fails the operation; false
	// falls back to deputy's own identity and says so in the operation
	// status.
	Enforced *bool `json:"enforced,omitempty"`
}

// IsEnforced reports Enforced, true when unset.
func (i SyncImpersonation) IsEnforced() bool { return i.Enforced == nil || *i.Enforced }

// SyncCluster is one entry of the cluster registry. Set either Kubeconfig
// (with an optional Context) or InCluster.
type SyncCluster struct {
	// Name is how Applications name the cluster (destination.name).
	Name string `json:"name"`
	// Server is the cluster's API server URL as Applications and AppProjects
	// write it (destination.server), e.g. https://kubernetes.default.svc.
	Server string `json:"server"`
	// Kubeconfig is the kubeconfig deputy connects with; Context picks a
	// context in it (default: its current context).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	// InCluster connects with the Pod's ServiceAccount.
	InCluster bool `json:"inCluster,omitempty"`
}

// RepositoryCredentials are the credentials of the repositories URL covers
// (same scheme, host and port; path equal or below on a '/' boundary): Git
// repositories, Helm repositories and OCI registries of chart sources;
// username and password from two files, or from a Secret (keys username
// and password). Set one of the two.
type RepositoryCredentials struct {
	// URL is an https:// repository URL or path prefix, e.g.
	// https://github.com/example (covers https://github.com/example/app.git,
	// not https://github.com/example-evil/app.git), or oci://HOST/PATH for
	// an OCI registry's charts (covers a chart source whose repoURL is
	// oci://HOST/PATH or below).
	URL string `json:"url"`
	// UsernameFile and PasswordFile are files holding the username and the
	// password or token (trailing newlines are ignored); re-read for every
	// fetch, so a rotated secret volume is picked up.
	UsernameFile string `json:"usernameFile,omitempty"`
	PasswordFile string `json:"passwordFile,omitempty"`
	// Secret is a Secret in the cluster of cluster mode with the keys
	// username and password.
	Secret *SecretReference `json:"secret,omitempty"`
}

// SecretReference names a Secret.
type SecretReference struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Cluster configures the connection to the cluster. Without kubeconfig and
// inCluster deputy runs in file mode.
type Cluster struct {
	// Kubeconfig is a kubeconfig file (--kubeconfig); Context picks a context in it.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	// InCluster uses the Pod's ServiceAccount (--in-cluster).
	InCluster bool `json:"inCluster,omitempty"`
}

// TLS configures the serving certificate and client-certificate
// authentication of the review endpoints.
type TLS struct {
	// CertDir holds tls.crt/tls.key (and ca.crt); when neither CertFile nor
	// KeyFile is set and the directory has no certificates, deputy generates a
	// development CA and certificates there (`deputy certs init`).
	CertDir string `json:"certDir,omitempty"`
	// CertFile and KeyFile are the serving certificate and key (PEM). They are
	// reloaded when they change.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ClientCAFile, when set, requires a client certificate signed by this CA
	// on /authorize and /authenticate (and /validate with
	// RequireClientCertForValidate). With CertDir and no ClientCAFile, the
	// CertDir's ca.crt is used.
	ClientCAFile string `json:"clientCAFile,omitempty"`
	// AllowedClientNames restricts the client certificate's common name; empty
	// allows any name the CA signed. Default with CertDir: [kube-apiserver].
	AllowedClientNames []string `json:"allowedClientNames,omitempty"`
	// RequireClientCertForValidate also requires the client certificate on
	// /validate. kube-apiserver presents one to admission webhooks only when
	// configured through --admission-control-config-file, so it is off by
	// default.
	RequireClientCertForValidate bool `json:"requireClientCertForValidate,omitempty"`
	// MinVersion is VersionTLS12 (default) or VersionTLS13.
	MinVersion string `json:"minVersion,omitempty"`
}

// Policy configures the policy sources.
type Policy struct {
	// Paths are files or directories of policy (.yaml/.yml/.json objects,
	// .csv token files). Empty means the example policy embedded in the binary.
	Paths []string `json:"paths,omitempty"`
	// PollInterval re-reads the files this often besides reacting to file
	// events (a safety net for filesystems without inotify). Default 30s;
	// unset or 0 means the default.
	PollInterval metav1.Duration `json:"pollInterval,omitempty"`
}

// Shutdown configures graceful termination.
type Shutdown struct {
	// Delay keeps serving (with /readyz red) this long after SIGTERM so load
	// balancers stop sending traffic first. Default 0.
	Delay metav1.Duration `json:"delay,omitempty"`
	// GracePeriod bounds how long in-flight requests may take to drain.
	// Default 30s.
	GracePeriod metav1.Duration `json:"gracePeriod,omitempty"`
}

// Logging configures log output.
type Logging struct {
	// Level is debug, info (default), warn or error.
	Level string `json:"level,omitempty"`
	// Format is text (default) or json.
	Format string `json:"format,omitempty"`
	// Decisions is which SubjectAccessReview decisions are logged, one JSON
	// line each on stderr whatever Format says: none (default), denied
	// (every decision that is not an Allow: Deny and NoOpinion) or all
	// (--log-decisions).
	Decisions string `json:"decisions,omitempty"`
	// DecisionSampleRate is the fraction of the decisions Decisions selects
	// that are logged, in (0, 1]. Default 1 (--log-decision-sample-rate).
	DecisionSampleRate *float64 `json:"decisionSampleRate,omitempty"`
}

// Defaults of the embedded configuration.
const (
	DefaultListen       = "127.0.0.1:8443"
	DefaultCertDir      = ".deputy/certs"
	DefaultPollInterval = 30 * time.Second
	DefaultGracePeriod  = 30 * time.Second
	DefaultAPIAudience  = "https://kubernetes.default.svc.cluster.local"
	DefaultClientName   = "kube-apiserver"
	// DefaultClusterServer is how projects name the cluster they run in.
	DefaultClusterServer = "https://kubernetes.default.svc"
	// DefaultSyncServiceAccount is deputy's own sync identity.
	DefaultSyncServiceAccount = "deputy-system/deputy"
	// DefaultSyncCacheDir holds the sync engine's Git clones.
	DefaultSyncCacheDir = ".deputy/repos"
	// DefaultSyncParallelism is how many operations run at once.
	DefaultSyncParallelism = 8
	// DefaultSyncClusterName is the name of the cluster cluster mode
	// registers for syncs when sync.clusters is empty (Argo CD's name).
	DefaultSyncClusterName = "in-cluster"
	// MaxSyncParallelism bounds sync.parallelism: each operation holds a Git
	// checkout and rendered manifests in memory.
	MaxSyncParallelism = 256
	// DefaultSyncHealthTimeout is sync.healthTimeout's default (the sync
	// engine's, syncer.DefaultHealthTimeout).
	DefaultSyncHealthTimeout = 5 * time.Minute
)

// Default returns the embedded default configuration: 127.0.0.1:8443,
// generated certificates under .deputy/certs, client certificates from that
// CA with the name kube-apiserver, the embedded example policy, NoOpinion.
func Default() *DeputyConfiguration {
	c := &DeputyConfiguration{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind}}
	SetDefaults(c)
	return c
}

// SetDefaults fills unset fields with their defaults. CertDir is defaulted
// only when no serving certificate file is configured.
func SetDefaults(c *DeputyConfiguration) {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.TLS.CertFile == "" && c.TLS.KeyFile == "" && c.TLS.CertDir == "" {
		c.TLS.CertDir = DefaultCertDir
	}
	if c.TLS.MinVersion == "" {
		c.TLS.MinVersion = "VersionTLS12"
	}
	if c.Policy.PollInterval.Duration == 0 {
		c.Policy.PollInterval.Duration = DefaultPollInterval
	}
	if c.Authorization.DefaultDecision == "" {
		c.Authorization.DefaultDecision = "NoOpinion"
	}
	if len(c.Sync.ProjectNamespaces) == 0 {
		c.Sync.ProjectNamespaces = []string{OwnNamespace()}
	}
	defaultImpersonatorNamespaces(&c.Authorization.Impersonation, c.Sync.ProjectNamespaces)
	SetImpersonationDefaults(&c.Authorization.Impersonation)
	SetAuthenticationDefaults(&c.Authentication)
	if c.Shutdown.GracePeriod.Duration == 0 {
		c.Shutdown.GracePeriod.Duration = DefaultGracePeriod
	}
	if c.Logging.Level == "" {
		c.Logging.Level = "info"
	}
	if c.Logging.Format == "" {
		c.Logging.Format = "text"
	}
	if c.Logging.Decisions == "" {
		c.Logging.Decisions = "none"
	}
	if c.Logging.DecisionSampleRate == nil {
		one := 1.0
		c.Logging.DecisionSampleRate = &one
	}
	SetSyncDefaults(&c.Sync, c.Cluster)
	SetControllerDefaults(&c.Sync)
	SetAPIDefaults(&c.API)
}

// SetSyncDefaults fills the sync engine's defaults: impersonation enforced,
// cache dir .deputy/repos, parallelism 8, health timeout 5m (or
// sync.limits.operationTimeout when that is shorter), and, in cluster mode without a
// cluster registry, the cluster deputy reads registered as "in-cluster" at
// https://kubernetes.default.svc.
func SetSyncDefaults(s *Sync, cluster Cluster) {
	if s.Impersonation.Enforced == nil {
		t := true
		s.Impersonation.Enforced = &t
	}
	if s.CacheDir == "" {
		s.CacheDir = DefaultSyncCacheDir
	}
	if s.Parallelism == 0 {
		s.Parallelism = DefaultSyncParallelism
	}
	SetSyncSourcesDefaults(&s.SyncSources)
	if s.HealthTimeout.Duration == 0 {
		// The default never exceeds the operation's own timeout, which a
		// configuration may set lower (validation refuses only an explicit
		// healthTimeout above it).
		s.HealthTimeout.Duration = min(DefaultSyncHealthTimeout, s.Limits.OperationTimeout.Duration)
	}
	if len(s.Clusters) == 0 && (cluster.Kubeconfig != "" || cluster.InCluster) {
		s.Clusters = []SyncCluster{{Name: DefaultSyncClusterName, Server: DefaultClusterServer,
			Kubeconfig: cluster.Kubeconfig, Context: cluster.Context, InCluster: cluster.InCluster}}
	}
}

// Load reads a configuration file strictly (unknown and duplicate fields are
// errors, field names are case-sensitive) without applying defaults.
//
// Errors: unreadable file, invalid YAML, wrong apiVersion/kind, unknown fields;
// each names the file.
func Load(path string) (*DeputyConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read config file: %w", err)
	}
	return Decode(path, data)
}

// Decode is Load on bytes; name is used in error messages.
func Decode(name string, data []byte) (*DeputyConfiguration, error) {
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("config file %s: not valid YAML: %w", name, err)
	}
	var c DeputyConfiguration
	strictErrs, err := kjson.UnmarshalStrict(jsonData, &c, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", name, err)
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("config file %s: %s (see docs/configuration.md for the fields)", name, strings.Join(msgs, "; "))
	}
	if c.APIVersion != APIVersion || c.Kind != Kind {
		return nil, fmt.Errorf("config file %s: apiVersion/kind is %q/%q, want %s/%s", name, c.APIVersion, c.Kind, APIVersion, Kind)
	}
	return &c, nil
}

// Validate checks a defaulted configuration and returns every problem at
// once, each with its field path (e.g. `tls.keyFile: Required value: ...`).
func Validate(c *DeputyConfiguration) field.ErrorList {
	var errs field.ErrorList
	if host, port, err := net.SplitHostPort(c.Listen); err != nil || port == "" {
		errs = append(errs, field.Invalid(field.NewPath("listen"), c.Listen, "must be HOST:PORT, e.g. 127.0.0.1:8443 or :8443"))
	} else if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		errs = append(errs, field.Invalid(field.NewPath("listen"), c.Listen, "HOST must be an IP address, localhost or empty (all interfaces)"))
	}
	tlsPath := field.NewPath("tls")
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, field.Required(tlsPath.Child("keyFile"), "certFile and keyFile must be set together (flags --tls-cert-file and --tls-private-key-file)"))
	}
	if c.TLS.CertFile == "" && c.TLS.CertDir == "" {
		errs = append(errs, field.Required(tlsPath.Child("certDir"), "set certDir (--cert-dir) or certFile and keyFile"))
	}
	if c.TLS.MinVersion != "VersionTLS12" && c.TLS.MinVersion != "VersionTLS13" {
		errs = append(errs, field.NotSupported(tlsPath.Child("minVersion"), c.TLS.MinVersion, []string{"VersionTLS12", "VersionTLS13"}))
	}
	for i, n := range c.TLS.AllowedClientNames {
		if strings.TrimSpace(n) == "" {
			errs = append(errs, field.Invalid(tlsPath.Child("allowedClientNames").Index(i), n, "must not be empty"))
		}
	}
	if len(c.TLS.AllowedClientNames) > 0 && c.TLS.ClientCAFile == "" && c.TLS.CertDir == "" {
		errs = append(errs, field.Required(tlsPath.Child("clientCAFile"), "allowedClientNames needs a client CA (--client-ca-file)"))
	}
	for i, p := range c.Policy.Paths {
		if strings.TrimSpace(p) == "" {
			errs = append(errs, field.Invalid(field.NewPath("policy", "paths").Index(i), p, "must not be empty"))
		}
	}
	if c.Policy.PollInterval.Duration < time.Second {
		errs = append(errs, field.Invalid(field.NewPath("policy", "pollInterval"), c.Policy.PollInterval.Duration.String(), "must be at least 1s"))
	}
	switch c.Authorization.DefaultDecision {
	case "NoOpinion", "Deny":
	default:
		errs = append(errs, field.NotSupported(field.NewPath("authorization", "defaultDecision"), c.Authorization.DefaultDecision, []string{"NoOpinion", "Deny"}))
	}
	errs = append(errs, validateImpersonation(&c.Authorization.Impersonation, field.NewPath("authorization", "impersonation"))...)
	if c.Cluster.InCluster && c.Cluster.Kubeconfig != "" {
		errs = append(errs, field.Invalid(field.NewPath("cluster", "inCluster"), true, "set either cluster.kubeconfig (--kubeconfig) or cluster.inCluster (--in-cluster), not both"))
	}
	if c.Cluster.Context != "" && c.Cluster.Kubeconfig == "" {
		errs = append(errs, field.Invalid(field.NewPath("cluster", "context"), c.Cluster.Context, "a context needs cluster.kubeconfig (--kubeconfig): it names a context in that file"))
	}
	errs = append(errs, validateAuthentication(&c.Authentication, c.Cluster, field.NewPath("authentication"))...)
	if c.Shutdown.Delay.Duration < 0 {
		errs = append(errs, field.Invalid(field.NewPath("shutdown", "delay"), c.Shutdown.Delay.Duration.String(), "must not be negative"))
	}
	if c.Shutdown.GracePeriod.Duration <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("shutdown", "gracePeriod"), c.Shutdown.GracePeriod.Duration.String(), "must be positive"))
	}
	switch c.Logging.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, field.NotSupported(field.NewPath("logging", "level"), c.Logging.Level, []string{"debug", "info", "warn", "error"}))
	}
	switch c.Logging.Format {
	case "text", "json":
	default:
		errs = append(errs, field.NotSupported(field.NewPath("logging", "format"), c.Logging.Format, []string{"text", "json"}))
	}
	switch c.Logging.Decisions {
	case "none", "denied", "all":
	default:
		errs = append(errs, field.NotSupported(field.NewPath("logging", "decisions"), c.Logging.Decisions, []string{"none", "denied", "all"}))
	}
	if r := c.Logging.DecisionSampleRate; r != nil && !(*r > 0 && *r <= 1) {
		errs = append(errs, field.Invalid(field.NewPath("logging", "decisionSampleRate"), *r,
			"must be a fraction in (0, 1], e.g. 0.1 to log one decision in ten (--log-decision-sample-rate); to log none set logging.decisions: none"))
	}
	errs = append(errs, validateSync(&c.Sync, c.Cluster, field.NewPath("sync"))...)
	errs = append(errs, validateSyncSources(c, field.NewPath("sync"))...)
	errs = append(errs, validateController(&c.Sync, c.Cluster, field.NewPath("sync"))...)
	errs = append(errs, validateNamespaceList(c.Sync.ProjectNamespaces, field.NewPath("sync", "projectNamespaces"))...)
	errs = append(errs, validateAPI(&c.API, c.Cluster, field.NewPath("api"))...)
	return errs
}

// Marshal renders c as YAML, for `deputy serve --print-config`.
func Marshal(c *DeputyConfiguration) ([]byte, error) {
	data, err := yaml.Marshal(c)
	if err != nil {
		return nil, err
	}
	return bytes.TrimSpace(data), nil
}

func validateSync(s *Sync, cluster Cluster, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(s.CacheDir) == "" {
		errs = append(errs, field.Required(fld.Child("cacheDir"), "set the directory for Git clones (--sync-cache-dir), e.g. "+DefaultSyncCacheDir))
	}
	if s.Parallelism < 1 || s.Parallelism > MaxSyncParallelism {
		errs = append(errs, field.Invalid(fld.Child("parallelism"), s.Parallelism, fmt.Sprintf("must be between 1 and %d (--sync-parallelism)", MaxSyncParallelism)))
	}
	switch h, op := s.HealthTimeout.Duration, s.Limits.OperationTimeout.Duration; {
	case h < time.Second:
		errs = append(errs, field.Invalid(fld.Child("healthTimeout"), h.String(), "must be at least 1s, e.g. 5m (--sync-health-timeout)"))
	case op > 0 && h > op:
		errs = append(errs, field.Invalid(fld.Child("healthTimeout"), h.String(), fmt.Sprintf("must not exceed sync.limits.operationTimeout (%s), which ends the operation first: lower healthTimeout or raise operationTimeout", op)))
	}
	names, servers := map[string]int{}, map[string]int{}
	for i, c := range s.Clusters {
		f := fld.Child("clusters").Index(i)
		switch {
		case c.Name == "":
			errs = append(errs, field.Required(f.Child("name"), "name the cluster as Applications do in destination.name, e.g. in-cluster"))
		case len(validation.IsDNS1123Subdomain(c.Name)) > 0:
			errs = append(errs, field.Invalid(f.Child("name"), c.Name, "must be a lower-case DNS-1123 name, e.g. in-cluster or prod-eu"))
		default:
			if j, dup := names[c.Name]; dup {
				errs = append(errs, field.Duplicate(f.Child("name"), fmt.Sprintf("%s (also clusters[%d])", c.Name, j)))
			} else {
				names[c.Name] = i
			}
		}
		if u, err := url.Parse(c.Server); c.Server == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, field.Invalid(f.Child("server"), c.Server, "must be the API server URL Applications use in destination.server, e.g. https://kubernetes.default.svc"))
		} else if j, dup := servers[c.Server]; dup {
			errs = append(errs, field.Duplicate(f.Child("server"), fmt.Sprintf("%s (also clusters[%d])", c.Server, j)))
		} else {
			servers[c.Server] = i
		}
		switch {
		case c.InCluster && c.Kubeconfig != "":
			errs = append(errs, field.Invalid(f.Child("inCluster"), true, "set either kubeconfig or inCluster, not both"))
		case !c.InCluster && c.Kubeconfig == "":
			errs = append(errs, field.Required(f.Child("kubeconfig"), "say how to connect: kubeconfig (and optionally context) or inCluster: true"))
		}
		if c.Context != "" && c.Kubeconfig == "" {
			errs = append(errs, field.Invalid(f.Child("context"), c.Context, "a context needs kubeconfig: it names a context in that file"))
		}
	}
	prefixes := map[string]int{}
	for i, r := range s.Repositories {
		f := fld.Child("repositories").Index(i)
		// The URL's syntax is checked with the matching rule
		// (credentialURLProblem, in validateSyncSources).
		if r.URL == "" {
			errs = append(errs, field.Invalid(f.Child("url"), r.URL, "must be a repository URL or path prefix, e.g. https://github.com/example/"))
		} else if j, dup := prefixes[r.URL]; dup {
			errs = append(errs, field.Duplicate(f.Child("url"), fmt.Sprintf("%s (also repositories[%d])", r.URL, j)))
		} else {
			prefixes[r.URL] = i
		}
		files := r.UsernameFile != "" || r.PasswordFile != ""
		switch {
		case files && r.Secret != nil:
			errs = append(errs, field.Invalid(f.Child("secret"), r.Secret.Namespace+"/"+r.Secret.Name, "set either usernameFile and passwordFile or secret, not both"))
		case !files && r.Secret == nil:
			errs = append(errs, field.Required(f, "set usernameFile and passwordFile, or secret (a Secret with the keys username and password)"))
		case files && r.UsernameFile == "":
			errs = append(errs, field.Required(f.Child("usernameFile"), "usernameFile and passwordFile must be set together (for a token, put any non-empty username in usernameFile)"))
		case files && r.PasswordFile == "":
			errs = append(errs, field.Required(f.Child("passwordFile"), "usernameFile and passwordFile must be set together"))
		}
		if r.Secret != nil {
			sf := f.Child("secret")
			if r.Secret.Namespace == "" {
				errs = append(errs, field.Required(sf.Child("namespace"), "the Secret's namespace"))
			}
			if r.Secret.Name == "" {
				errs = append(errs, field.Required(sf.Child("name"), "the Secret's name"))
			}
			if cluster.Kubeconfig == "" && !cluster.InCluster {
				errs = append(errs, field.Invalid(sf, r.Secret.Namespace+"/"+r.Secret.Name, "a Secret is read from the cluster: it needs cluster mode (cluster.kubeconfig / --kubeconfig or cluster.inCluster / --in-cluster); in file mode use usernameFile and passwordFile"))
			}
		}
	}
	return errs
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/examples"
	"deputy.dev/deputy/serve"
)

// serveFunc runs the server with a complete, valid configuration.
type serveFunc func(ctx context.Context, cfg *config.DeputyConfiguration, out io.Writer) error

// serveFlags are the flags of `deputy serve`; each overrides its config field
// when given.
type serveFlags struct {
	configFile      string
	policy          []string
	listen          string
	certDir         string
	certFile        string
	keyFile         string
	clientCAFile    string
	allowedNames    []string
	defaultDecision string
	apiAudiences    []string
	logLevel        string
	logFormat       string
	logDecisions    string
	logSampleRate   float64
	shutdownDelay   time.Duration
	gracePeriod     time.Duration
	validateCert    bool
	tlsMinVersion   string
	pollInterval    time.Duration
	kubeconfig      string
	kubeContext     string
	inCluster       bool

	syncImpersonationEnabled  bool
	syncImpersonationEnforced bool
	syncCacheDir              string
	syncParallelism           int
	syncHealthTimeout         time.Duration

	// printConfig prints the effective configuration instead of serving.
	printConfig bool
}

func newServeCommand(run serveFunc) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve [--config FILE] [--policy PATH]... [--listen HOST:PORT] [--cert-dir DIR | --tls-cert-file F --tls-private-key-file F] [--client-ca-file F] [--kubeconfig F [--context C] | --in-cluster]",
		Short: "Serve /authorize, /authenticate and /validate for kube-apiserver",
		Long: `Serve SubjectAccessReview (/authorize), TokenReview (/authenticate) and
AdmissionReview (/validate) over HTTPS, plus /healthz, /readyz and /metrics.

Without flags deputy uses its embedded default: 127.0.0.1:8443, development
certificates generated under .deputy/certs, kube-apiserver client certificates
from that CA, and the example policy built into the binary.

It also serves deputy's own API under /apis/deputy.dev/v1alpha1: syncs of
Applications (deputy sync), run by the sync engine as configured in the
config file's sync section (--sync-* flags).

With --kubeconfig or --in-cluster deputy also reads the cluster's RBAC objects
and AppProjects through informers (cluster mode) for its impersonation gate;
/readyz stays red until they have been listed.

Flags override the fields of --config (config.deputy.dev/v1alpha1
DeputyConfiguration, see docs/configuration.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolveServeConfig(cmd, &f)
			if err != nil {
				return err
			}
			if f.printConfig {
				data, err := config.Marshal(cfg)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", data)
				return err
			}
			return run(cmd.Context(), cfg, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.configFile, "config", "", "DeputyConfiguration file (YAML)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration (file, flags and defaults) as YAML and exit")
	fs.StringArrayVar(&f.policy, "policy", nil, "policy file or directory (.yaml/.yml/.json objects, .csv tokens); repeatable; default: the embedded examples")
	fs.StringVar(&f.listen, "listen", "", "HOST:PORT to serve on (default "+config.DefaultListen+")")
	fs.StringVar(&f.certDir, "cert-dir", "", "directory with tls.crt/tls.key (and ca.crt); development certificates are generated there when none exist (default "+config.DefaultCertDir+")")
	fs.StringVar(&f.certFile, "tls-cert-file", "", "serving certificate (PEM), reloaded on change")
	fs.StringVar(&f.keyFile, "tls-private-key-file", "", "serving private key (PEM), reloaded on change")
	fs.StringVar(&f.clientCAFile, "client-ca-file", "", "require client certificates signed by this CA on the review endpoints (default with --cert-dir: its ca.crt)")
	fs.StringSliceVar(&f.allowedNames, "allowed-client-names", nil, "client certificate common names allowed on the review endpoints (default with --cert-dir: kube-apiserver)")
	fs.StringVar(&f.defaultDecision, "default-decision", "", "answer when no policy allows: NoOpinion (default) or Deny")
	fs.StringSliceVar(&f.apiAudiences, "api-audiences", nil, "audiences static tokens are valid for (default "+config.DefaultAPIAudience+")")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info (default), warn or error")
	fs.StringVar(&f.logFormat, "log-format", "", "text (default) or json")
	fs.StringVar(&f.logDecisions, "log-decisions", "", "decision log, one JSON line per SubjectAccessReview decision on stderr: none (default), denied (Deny and NoOpinion) or all")
	fs.Float64Var(&f.logSampleRate, "log-decision-sample-rate", 0, "fraction of the decisions --log-decisions selects that are logged, in (0, 1] (default 1)")
	fs.DurationVar(&f.shutdownDelay, "shutdown-delay", 0, "keep serving with /readyz red this long after SIGTERM")
	fs.BoolVar(&f.validateCert, "require-client-cert-for-validate", false, "also require the client certificate on /validate (needs kube-apiserver's --admission-control-config-file)")
	fs.StringVar(&f.tlsMinVersion, "tls-min-version", "", "VersionTLS12 (default) or VersionTLS13")
	fs.DurationVar(&f.pollInterval, "policy-poll-interval", 0, "re-read policy files this often besides file events; 0 keeps the default 30s")
	fs.DurationVar(&f.gracePeriod, "shutdown-grace-period", 0, "how long in-flight requests may take to drain after SIGTERM (default 30s)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "cluster mode: kubeconfig of the cluster whose RBAC objects and AppProjects deputy reads")
	fs.StringVar(&f.kubeContext, "context", "", "cluster mode: kubeconfig context to use (default: its current context)")
	fs.BoolVar(&f.inCluster, "in-cluster", false, "cluster mode with the Pod's ServiceAccount (instead of --kubeconfig)")
	fs.BoolVar(&f.syncImpersonationEnabled, "sync-impersonation-enabled", false, "syncs impersonate the ServiceAccount their AppProject derives (default false, as in Argo CD)")
	fs.BoolVar(&f.syncImpersonationEnforced, "sync-impersonation-enforced", true, "with impersonation enabled, fail a sync no destinationServiceAccounts entry matches (false: run it as deputy and say so)")
	fs.StringVar(&f.syncCacheDir, "sync-cache-dir", "", "directory of the sync engine's Git clones (default "+config.DefaultSyncCacheDir+")")
	fs.IntVar(&f.syncParallelism, "sync-parallelism", 0, fmt.Sprintf("sync operations that run at once; 0 keeps the default %d", config.DefaultSyncParallelism))
	fs.DurationVar(&f.syncHealthTimeout, "sync-health-timeout", 0, "how long a sync waits for one wave's resources to become healthy unless the Application or the sync sets it (sync.healthTimeout; 0 keeps the default 5m)")
	return cmd
}

// resolveServeConfig builds the configuration: embedded defaults, then the
// --config file, then every flag that was given; then defaults for what is
// still unset, then validation (all errors at once).
func resolveServeConfig(cmd *cobra.Command, f *serveFlags) (*config.DeputyConfiguration, error) {
	cfg := &config.DeputyConfiguration{}
	if f.configFile != "" {
		var err error
		if cfg, err = config.Load(f.configFile); err != nil {
			return nil, err
		}
	}
	for name, apply := range flagOverrides(cfg, f) {
		if cmd.Flags().Changed(name) {
			apply()
		}
	}
	cfg.APIVersion, cfg.Kind = config.APIVersion, config.Kind
	config.SetDefaults(cfg)
	if errs := config.Validate(cfg); len(errs) > 0 {
		var b strings.Builder
		b.WriteString("invalid configuration:")
		for _, e := range errs {
			b.WriteString("\n  ")
			b.WriteString(e.Error())
		}
		return nil, fmt.Errorf("%s", b.String())
	}
	return cfg, nil
}

// flagOverrides maps every flag of `deputy serve` but --config to the
// configuration field it sets when given.
func flagOverrides(cfg *config.DeputyConfiguration, f *serveFlags) map[string]func() {
	return map[string]func(){
		"policy":                           func() { cfg.Policy.Paths = f.policy },
		"listen":                           func() { cfg.Listen = f.listen },
		"cert-dir":                         func() { cfg.TLS.CertDir = f.certDir },
		"tls-cert-file":                    func() { cfg.TLS.CertFile = f.certFile },
		"tls-private-key-file":             func() { cfg.TLS.KeyFile = f.keyFile },
		"client-ca-file":                   func() { cfg.TLS.ClientCAFile = f.clientCAFile },
		"allowed-client-names":             func() { cfg.TLS.AllowedClientNames = f.allowedNames },
		"require-client-cert-for-validate": func() { cfg.TLS.RequireClientCertForValidate = f.validateCert },
		"tls-min-version":                  func() { cfg.TLS.MinVersion = f.tlsMinVersion },
		"default-decision":                 func() { cfg.Authorization.DefaultDecision = f.defaultDecision },
		"api-audiences":                    func() { cfg.Authentication.APIAudiences = f.apiAudiences },
		"log-level":                        func() { cfg.Logging.Level = f.logLevel },
		"log-format":                       func() { cfg.Logging.Format = f.logFormat },
		"log-decisions":                    func() { cfg.Logging.Decisions = f.logDecisions },
		"log-decision-sample-rate":         func() { r := f.logSampleRate; cfg.Logging.DecisionSampleRate = &r },
		"shutdown-delay":                   func() { cfg.Shutdown.Delay.Duration = f.shutdownDelay },
		"shutdown-grace-period":            func() { cfg.Shutdown.GracePeriod.Duration = f.gracePeriod },
		"policy-poll-interval":             func() { cfg.Policy.PollInterval.Duration = f.pollInterval },
		"kubeconfig":                       func() { cfg.Cluster.Kubeconfig = f.kubeconfig },
		"context":                          func() { cfg.Cluster.Context = f.kubeContext },
		"in-cluster":                       func() { cfg.Cluster.InCluster = f.inCluster },
		"sync-impersonation-enabled":       func() { cfg.Sync.Impersonation.Enabled = f.syncImpersonationEnabled },
		"sync-impersonation-enforced":      func() { e := f.syncImpersonationEnforced; cfg.Sync.Impersonation.Enforced = &e },
		"sync-cache-dir":                   func() { cfg.Sync.CacheDir = f.syncCacheDir },
		"sync-parallelism":                 func() { cfg.Sync.Parallelism = f.syncParallelism },
		"sync-health-timeout":              func() { cfg.Sync.HealthTimeout.Duration = f.syncHealthTimeout },
	}
}

// runServe is the real serveFunc.
func runServe(ctx context.Context, cfg *config.DeputyConfiguration, out io.Writer) error {
	log := newLogger(cfg.Logging, os.Stderr)
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	klog.SetSlogLogger(log)
	return serve.Run(ctx, cfg, log, func(s serve.Serving) {
		printHints(out, s)
	})
}

func newLogger(c config.Logging, w io.Writer) *slog.Logger {
	level := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}[c.Level]
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// printHints tells a newcomer what to do next: working curl lines against the
// example policy and the command that points a kube-apiserver at deputy.
func printHints(out io.Writer, s serve.Serving) {
	url := "https://" + s.Addr.String()
	fmt.Fprintf(out, "deputy is serving on %s\n", url)
	if s.CertDir == "" {
		return
	}
	tlsArgs := "--cacert " + filepath.Join(s.CertDir, certs.CACertFile)
	if s.ClientCAFile != "" {
		tlsArgs += " --cert " + filepath.Join(s.CertDir, certs.ClientCertFile) + " --key " + filepath.Join(s.CertDir, certs.ClientKeyFile)
	}
	if s.EmbeddedPolicy {
		sar := func(ns string) string {
			return fmt.Sprintf(`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice","groups":["system:authenticated"],"resourceAttributes":{"verb":"list","resource":"pods","namespace":"%s"}}}`, ns)
		}
		tr := fmt.Sprintf(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"%s"}}`, examples.AliceToken)
		fmt.Fprintf(out, "\nTry it (example policy: alice may list pods in team-a only):\n")
		fmt.Fprintf(out, "  # allowed\n  curl -s %s -H 'Content-Type: application/json' %s/authorize -d '%s'\n", tlsArgs, url, sar("team-a"))
		fmt.Fprintf(out, "  # not allowed (no opinion: kube-apiserver's next authorizer decides)\n  curl -s %s -H 'Content-Type: application/json' %s/authorize -d '%s'\n", tlsArgs, url, sar("team-b"))
		fmt.Fprintf(out, "  # token review of the demo token %s\n  curl -s %s -H 'Content-Type: application/json' %s/authenticate -d '%s'\n", examples.AliceToken, tlsArgs, url, tr)
	}
	fmt.Fprintf(out, "\nPoint a kube-apiserver at it:\n  %s config apiserver --url %s --certs %s --out %s\n",
		selfName(), url, s.CertDir, filepath.Join(filepath.Dir(filepath.Clean(s.CertDir)), "apiserver"))
	fmt.Fprintf(out, "\nHealth: curl -s %s '%s/readyz?verbose'   Metrics: %s/metrics   Stop: Ctrl-C\n", "--cacert "+filepath.Join(s.CertDir, certs.CACertFile), url, url)
}

// selfName is how the user invoked deputy, for copy-paste hints.
func selfName() string {
	if len(os.Args) > 0 && strings.Contains(os.Args[0], string(filepath.Separator)) {
		return os.Args[0]
	}
	return "deputy"
}

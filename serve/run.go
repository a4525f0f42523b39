package serve

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/authorizer"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/tokenreview"
	"deputy.dev/deputy/webhook"
	"deputy.dev/deputy/webhook/decisionlog"
)

// Serving describes what Run resolved from the configuration, for the
// startup hints `deputy serve` prints.
type Serving struct {
	Addr net.Addr
	// CertDir is set when certificates come from (or were generated in) a
	// certificate directory.
	CertDir string
	// GeneratedCerts is true when Run created certificates at start.
	GeneratedCerts bool
	// ClientCAFile is the client CA in use, "" when client certificates are
	// not required.
	ClientCAFile string
	// EmbeddedPolicy is true when the built-in example policy is served.
	EmbeddedPolicy bool
}

// Run is deputy's composition root for `deputy serve`: it resolves
// certificates (generating development ones in cfg.TLS.CertDir when none
// exist), starts the policy source, decides the run mode (file or cluster)
// once, builds the authorizer, token reviewer, deputy's Applications, API and
// admission handler, and serves until ctx ends. cfg must be defaulted and
// valid (config.SetDefaults, config.Validate). ready, if not nil, is called
// once the server listens.
//
// Errors: certificates cannot be generated or loaded, the client CA cannot be
// read, cluster mode's kubeconfig cannot be loaded, a component cannot be
// built from the configuration, or the server fails (see
// webhook.Server.Run). A policy that fails to load is not an error: deputy
// serves with /readyz red and answers no request with Allow until a policy
// loads.
func Run(ctx context.Context, cfg *config.DeputyConfiguration, log *slog.Logger, ready func(Serving)) error {
	tlsFiles, serving, err := resolveCertificates(cfg, log)
	if err != nil {
		return err
	}
	metrics := webhook.NewMetrics()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	source, embedded := startPolicySource(runCtx, cfg.Policy, log, metrics)
	serving.EmbeddedPolicy = embedded

	// gate is set by newAuthorizer; the sources rebuild its index eagerly on
	// change so that the first request after a change does not pay for it.
	var gate atomic.Pointer[authorizer.Gate]
	refreshGate := func() {
		if g := gate.Load(); g != nil {
			g.Refresh()
		}
	}
	mode, stopCluster, err := startRunMode(runCtx, cfg.Cluster, log, refreshGate)
	if err != nil {
		return err
	}
	defer func() { cancel(); stopCluster() }()

	clientAuth, clientCAVerify, err := startClientCA(runCtx, tlsFiles, log)
	if err != nil {
		return err
	}
	authz, err := newAuthorizer(cfg.Authorization, source, mode, &gate, log)
	if err != nil {
		return err
	}
	chains, err := newTokenChains(runCtx, cfg.Authentication, source, mode, metrics, log)
	if err != nil {
		return err
	}

	// Syncs: deputy's Applications (package apps) over the sync engine,
	// triggered through deputy's own API, whose callers are authenticated by
	// the same token chain (and client certificates of the client CA) and
	// authorized by the same authorizer as /authorize, and through the Git
	// push webhook.
	engine := newSyncRunner(cfg.Sync, mode, log)
	appMetrics, err := apps.NewMetrics(metrics.Registry)
	if err != nil {
		return err
	}
	applications, stopSyncs, err := startApplications(runCtx, cfg, mode, source.Current, engine, appMetrics, log)
	if err != nil {
		return err
	}
	defer func() { cancel(); stopSyncs() }() // an early return
	api, err := newAPI(runCtx, cfg, mode, apiParts{tokens: chains.API, clientCA: clientCAVerify, authz: authz,
		applications: applications, ready: policyLoaded(source)}, log)
	if err != nil {
		return err
	}
	gitHook, err := newGitWebhook(cfg.Sync.Webhook, applications, metrics, log)
	if err != nil {
		return err
	}

	decisions := newDecisionLog(cfg.Logging, metrics, os.Stderr)
	defer closeDecisionLog(decisions, log)

	srv := webhook.NewServer(webhook.ServerOptions{
		Listen:                       cfg.Listen,
		CertFile:                     tlsFiles.certFile,
		KeyFile:                      tlsFiles.keyFile,
		MinTLSVersion:                minTLSVersion(cfg.TLS.MinVersion),
		ClientAuth:                   clientAuth,
		RequireClientCertForValidate: cfg.TLS.RequireClientCertForValidate,
		Authorize: &webhook.AuthorizeHandler{Authorizer: authz, Metrics: metrics, Log: log,
			DecisionLog: decisions, PolicyGeneration: policyGeneration(source)},
		Authenticate:  newAuthenticateHandler(cfg.Authentication, chains, source, metrics, log),
		API:           api,
		GitWebhook:    gitHook,
		Validate:      newValidateHandler(cfg.Authorization, metrics, log),
		Readiness:     mode.readiness(source),
		Metrics:       metrics,
		Log:           log,
		ShutdownDelay: cfg.Shutdown.Delay.Duration,
		GracePeriod:   cfg.Shutdown.GracePeriod.Duration,
		BeforeStop:    stopSyncs,
		OnListen: func(addr net.Addr) {
			if ready != nil {
				serving.Addr = addr
				ready(serving)
			}
		},
	})
	return srv.Run(ctx)
}

// newDecisionLog starts the decision log of logging.decisions (nil for
// none): JSON lines on w, counted in deputy_decision_logs_written_total and
// deputy_decision_logs_dropped_total.
func newDecisionLog(l config.Logging, metrics *webhook.Metrics, w io.Writer) *decisionlog.Logger {
	mode, err := decisionlog.ParseMode(l.Decisions)
	if err != nil || mode == decisionlog.None {
		return nil // config.Validate refuses an unknown mode
	}
	rate := 1.0
	if l.DecisionSampleRate != nil {
		rate = *l.DecisionSampleRate
	}
	written, dropped := metrics.DecisionLogCounters()
	return decisionlog.New(decisionlog.Options{Mode: mode, SampleRate: rate, Output: w, Written: written, Dropped: dropped})
}

// closeDecisionLog writes what the decision log holds once the server has
// stopped serving (its drained requests logged their decisions), for up
// to decisionLogFlushTimeout.
func closeDecisionLog(d *decisionlog.Logger, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), decisionLogFlushTimeout)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		log.Warn("decision log not flushed", "error", err.Error())
	}
}

// decisionLogFlushTimeout bounds the flush of the decision log at
// shutdown: stderr may block.
const decisionLogFlushTimeout = 5 * time.Second

// policyGeneration names the policy for the decision log: the first 12
// hex digits of the serving snapshot's digest (policy.Snapshot.Digest);
// in cluster mode the cluster's RBAC objects and AppProjects come from
// informers and have no generation, so the digest names the file policy
// only.
func policyGeneration(source *policy.FileSource) func() string {
	return func() string {
		s := source.Current()
		if s == nil {
			return ""
		}
		if len(s.Digest) > 12 {
			return s.Digest[:12]
		}
		return s.Digest
	}
}

// minTLSVersion maps tls.minVersion ("VersionTLS12", "VersionTLS13") onto
// crypto/tls; TLS 1.2 unless 1.3 is asked for.
func minTLSVersion(v string) uint16 {
	if v == "VersionTLS13" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

// newAuthenticateHandler answers /authenticate with the webhook chain (token
// file, project tokens, OIDC; never a delegated TokenReview: kube-apiserver's
// TokenReview calls deputy's webhook); the policy's static tokens, looked
// up regardless of audiences, explain an audience mismatch in the log.
func newAuthenticateHandler(a config.Authentication, chains *tokenreview.Chains, source *policy.FileSource, metrics *webhook.Metrics, log *slog.Logger) *webhook.AuthenticateHandler {
	return &webhook.AuthenticateHandler{Reviewer: tokenreview.NewReviewer(chains.Webhook, a.APIAudiences), Metrics: metrics, Log: log, APIAudiences: a.APIAudiences,
		KnownToken: func(token string) (string, bool) {
			u, ok := source.Current().TokenSetOf().Lookup(token)
			if !ok {
				return "", false
			}
			return u.GetName(), true
		}}
}

// newValidateHandler answers /validate: AppProject admission (with lint
// warnings) and the RBAC admission lint of the gate's grammar
// (authorization.impersonation.gateRBAC).
func newValidateHandler(a config.Authorization, metrics *webhook.Metrics, log *slog.Logger) *webhook.ValidateHandler {
	return webhook.NewValidateHandler(webhook.NewValidator(webhook.NewAppProjectValidator(true),
		webhook.NewImpersonationRBACValidator(a.Impersonation.GateRBAC)), metrics, log)
}

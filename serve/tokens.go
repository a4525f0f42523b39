package serve

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/client-go/rest"

	"deputy.dev/deputy/config"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/tokenreview"
	"deputy.dev/deputy/webhook"
)

// newTokenChains builds token authentication: the webhook chain (token
// file, project tokens, OIDC) answers /authenticate; deputy's API uses the
// API chain, which adds the cached, delegated TokenReview of cluster mode.
// Never delegate from /authenticate: kube-apiserver's TokenReview calls
// deputy's webhook. Static tokens come from the policy snapshot, project
// roles from where the run mode keeps AppProjects; the project token
// revocation list is reloaded until ctx ends, each reload logged.
//
// Errors: those of tokenChainOptions and tokenreview.NewChains.
func newTokenChains(ctx context.Context, a config.Authentication, source *policy.FileSource, mode *runMode, metrics *webhook.Metrics, log *slog.Logger) (*tokenreview.Chains, error) {
	opts, err := tokenChainOptions(a, mode.restConfig)
	if err != nil {
		return nil, err
	}
	opts.StaticTokens = func() *policy.TokenSet { return source.Current().TokenSetOf() }
	opts.ProjectRoles = mode.projectRoles(source.Current)
	opts.Registerer = metrics.Registry
	opts.OnRevocationReload = func(file string, revoked int, err error) {
		if err != nil {
			log.Error("project token revocation list not reloaded; the last one stays in force", "file", file, "error", err.Error())
			return
		}
		log.Info("project token revocation list reloaded", "file", file, "revoked", revoked)
	}
	return tokenreview.NewChains(ctx, opts)
}

// tokenChainOptions maps the (defaulted, validated) authentication section
// onto the token chains' options; cluster is the client configuration of
// cluster mode, nil in file mode, where the delegated TokenReview is off
// unless authentication.delegated.enabled says otherwise (which then fails in
// tokenreview.NewChains, naming the setting). The caller adds what does not
// come from the file: static tokens, project roles, metrics, the reload
// callback.
//
// Errors: a jwt entry that cannot be converted to k8s.io/apiserver's type,
// naming authentication.jwt[i].
func tokenChainOptions(a config.Authentication, cluster *rest.Config) (tokenreview.Options, error) {
	o := tokenreview.Options{
		APIAudiences: a.APIAudiences,
		ProjectTokens: tokenreview.ProjectTokenFiles{
			Issuer:               a.ProjectTokens.Issuer,
			SigningKeyFile:       a.ProjectTokens.SigningKeyFile,
			VerificationKeyFiles: a.ProjectTokens.VerificationKeyFiles,
			RevocationFile:       a.ProjectTokens.RevocationFile,
		},
		Delegated: tokenreview.Delegation{
			Enabled:         cluster != nil,
			CacheTTL:        a.Delegated.CacheTTL.Duration,
			FailureCacheTTL: a.Delegated.FailureCacheTTL.Duration,
			Timeout:         a.Delegated.Timeout.Duration,
		},
		ClusterConfig: cluster,
	}
	if a.Delegated.Enabled != nil {
		o.Delegated.Enabled = *a.Delegated.Enabled
	}
	for i := range a.JWT {
		in, err := a.JWT[i].Internal()
		if err != nil {
			return tokenreview.Options{}, fmt.Errorf("authentication.jwt[%d]: %w", i, err)
		}
		o.JWT = append(o.JWT, tokenreview.JWTAuthenticator{Config: in, CertificateAuthorityFile: a.JWT[i].CertificateAuthorityFile})
	}
	return o, nil
}

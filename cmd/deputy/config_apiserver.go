package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"

	"github.com/spf13/cobra"

	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/manifests"
)

// newConfigCommand returns `deputy config`, which renders configuration for
// the components around deputy (package manifests).
func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Render configuration that points other components at deputy",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newConfigAPIServerCommand())
	return cmd
}

// newConfigAPIServerCommand returns `deputy config apiserver`:
// certs.LoadAPIServerClient, manifests.APIServerFiles and manifests.WriteFiles
// with flags, then the operator's instructions.
func newConfigAPIServerCommand() *cobra.Command {
	var (
		certsDir, out, nodeDir string
		opts                   manifests.APIServerOptions
	)
	cmd := &cobra.Command{
		Use:   "apiserver --url https://HOST:PORT --certs DIR --out DIR",
		Short: "Write the files that make kube-apiserver call deputy, and say how to install them",
		Long: `Write, into --out, the kube-apiserver configuration for deputy's three webhooks:
authorization-config.yaml (--authorization-config), the two webhook
kubeconfigs it and --authentication-token-webhook-config-file refer to, and
validatingwebhook.yaml (kubectl apply). The CA and kube-apiserver's client
certificate are read from --certs, as written by "deputy certs init".

The AuthorizationConfiguration asks Node first, then deputy twice: once for
impersonation checks only (--impersonation-failure-policy, default Deny: the
gate stays closed while deputy is unreachable), once for everything else
(--failure-policy, default NoOpinion: RBAC decides alone meanwhile), then RBAC.
system:masters, nodes, control-plane components, deputy's own ServiceAccount
(--service-account) and kube-apiserver's health and version paths never wait
for deputy (manifests/apiserver/README.md).

--legacy-flags is for a kube-apiserver configured with --authorization-mode
and --authorization-webhook-config-file: it prints those flags instead of
writing authorization-config.yaml. They have no matchConditions and no
failure policy: while deputy is unreachable the gate is open.`,
		Example: `  deputy config apiserver --url https://127.0.0.1:8443 --certs certs/ --out apiserver/ --dir /etc/kubernetes/deputy
  deputy config apiserver --url https://10.96.0.100 --certs certs/ --out apiserver/ --dir /etc/kubernetes/deputy --legacy-flags`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.LegacyFlags {
				// Say which flag the operator typed; the defaults are not
				// passed on (APIServerFiles refuses them with the legacy flags).
				for _, name := range []string{"failure-policy", "impersonation-failure-policy", "timeout"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s cannot be used with --legacy-flags: kube-apiserver's --authorization-webhook-* flags have no failure policy and no timeout (a webhook error is no opinion after %s); drop --legacy-flags to use --authorization-config", name, manifests.LegacyWebhookTimeout)
					}
				}
				opts.FailurePolicy, opts.ImpersonationFailurePolicy, opts.AuthorizationTimeout = "", "", 0
			}
			client, err := certs.LoadAPIServerClient(certsDir)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w\ncreate the certificates first: deputy certs init --dir %s", err, certsDir)
			}
			if err != nil {
				return err
			}
			if u, err := url.Parse(opts.URL); err == nil && u.Hostname() != "" {
				if err := certs.CheckServingHost(certsDir, u.Hostname()); err != nil {
					return err
				}
			}
			opts.CA, opts.ClientCert, opts.ClientKey = client.CA, client.Cert, client.Key
			opts.Dir = nodeDir
			if opts.Dir == "" {
				abs, err := filepath.Abs(out)
				if err != nil {
					return fmt.Errorf("failed to resolve --out: %w", err)
				}
				opts.Dir = filepath.ToSlash(abs)
			}
			files, err := manifests.APIServerFiles(opts)
			if err != nil {
				return err
			}
			paths, err := manifests.WriteFiles(out, files)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, p := range paths {
				fmt.Fprintln(w, "wrote "+p)
			}
			fmt.Fprintln(w)
			fmt.Fprint(w, manifests.APIServerInstructions(opts, out))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.URL, "url", "", "deputy's base URL as kube-apiserver reaches it, https://HOST:PORT (HOST must be in the serving certificate's --hosts)")
	f.StringVar(&certsDir, "certs", "", `directory written by "deputy certs init" (reads ca.crt, kube-apiserver-client.crt, kube-apiserver-client.key)`)
	f.StringVar(&out, "out", "", "directory to write the files to (created with mode 0700)")
	f.StringVar(&nodeDir, "dir", "", "absolute directory the files will be copied to on the control-plane node (default: the absolute --out)")
	f.StringVar(&opts.ImpersonationFailurePolicy, "impersonation-failure-policy", manifests.FailurePolicyDeny, "what kube-apiserver decides for an impersonation check when deputy is unreachable: Deny (the gate stays closed) or NoOpinion (RBAC alone)")
	f.StringVar(&opts.FailurePolicy, "failure-policy", manifests.FailurePolicyNoOpinion, "what kube-apiserver decides for every other request deputy would be asked when deputy is unreachable: NoOpinion (RBAC alone) or Deny")
	f.StringVar(&opts.ServiceAccount, "service-account", manifests.DefaultServiceAccount, "deputy's own ServiceAccount, namespace/name: its requests other than impersonation never wait for deputy")
	f.BoolVar(&opts.LegacyFlags, "legacy-flags", false, "print --authorization-mode and --authorization-webhook-* flags instead of writing authorization-config.yaml (no matchConditions, no failure policy: the gate is open while deputy is unreachable)")
	f.DurationVar(&opts.AuthorizationTimeout, "timeout", manifests.DefaultAuthorizationTimeout, "authorization webhook timeout (at most 30s)")
	f.DurationVar(&opts.AuthorizedTTL, "authorized-ttl", manifests.DefaultAuthorizedTTL, "how long kube-apiserver caches deputy's allow answers")
	f.DurationVar(&opts.UnauthorizedTTL, "unauthorized-ttl", manifests.DefaultUnauthorizedTTL, "how long kube-apiserver caches deputy's deny and no-opinion answers")
	for _, name := range []string{"url", "certs", "out"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

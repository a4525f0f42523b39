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
certificate are read from --certs, as written by "deputy certs init".`,
		Example: "  deputy config apiserver --url https://127.0.0.1:8443 --certs certs/ --out apiserver/ --dir /etc/kubernetes/deputy",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	f.StringVar(&opts.FailurePolicy, "failure-policy", manifests.FailurePolicyDeny, "what kube-apiserver decides when deputy is unreachable: Deny or NoOpinion")
	f.DurationVar(&opts.AuthorizationTimeout, "timeout", manifests.DefaultAuthorizationTimeout, "authorization webhook timeout (at most 30s)")
	f.DurationVar(&opts.AuthorizedTTL, "authorized-ttl", manifests.DefaultAuthorizedTTL, "how long kube-apiserver caches deputy's allow answers")
	f.DurationVar(&opts.UnauthorizedTTL, "unauthorized-ttl", manifests.DefaultUnauthorizedTTL, "how long kube-apiserver caches deputy's deny and no-opinion answers")
	for _, name := range []string{"url", "certs", "out"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

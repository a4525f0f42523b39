package main

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"deputy.dev/deputy/certs"
)

// newCertsCommand returns `deputy certs`, which manages the certificates
// kube-apiserver and deputy use to talk to each other (package certs).
func newCertsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Manage the certificates between kube-apiserver and deputy",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newCertsInitCommand())
	return cmd
}

// newCertsInitCommand returns `deputy certs init`: certs.Init with flags.
func newCertsInitCommand() *cobra.Command {
	var (
		dir   string
		hosts []string
		force bool
	)
	cmd := &cobra.Command{
		Use:   "init --dir DIR [--hosts h1,h2] [--force]",
		Short: "Create a CA, deputy's serving certificate and kube-apiserver's client certificate",
		Long: `Create, under --dir, a CA (ca.crt, ca.key), deputy's serving certificate
(tls.crt, tls.key) for --hosts, and the client certificate kube-apiserver
presents to deputy (kube-apiserver-client.crt, kube-apiserver-client.key).

Running it again keeps valid files unchanged and reissues only what is
missing, expiring, or does not cover --hosts. --force regenerates everything,
including the CA (kube-apiserver must then be given the new one).`,
		Example: "  deputy certs init --dir certs/ --hosts deputy.deputy-system.svc,127.0.0.1",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := certs.Init(dir, certs.InitOptions{Hosts: hosts, Force: force})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, f := range res.Files {
				line := fmt.Sprintf("%-8s %s", f.Action, f.Path)
				if f.Reason != "" {
					line += " (" + f.Reason + ")"
				}
				fmt.Fprintln(out, line)
			}
			for _, w := range res.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
			}
			host := suggestedHost(res.Hosts)
			switch {
			case res.CAChanged:
				fmt.Fprintf(out, "\nThe CA is new. Next: deputy config apiserver --url https://%s:8443 --certs %s --out apiserver/\n", host, dir)
			case res.Changed():
				fmt.Fprintln(out, "\nThe CA is unchanged: kube-apiserver's configuration stays valid; a running deputy reloads the new certificates.")
			default:
				fmt.Fprintf(out, "\nNothing to do. Next, if not done yet: deputy config apiserver --url https://%s:8443 --certs %s --out apiserver/\n", host, dir)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory for the certificates and keys (created with mode 0700)")
	f.StringSliceVar(&hosts, "hosts", nil, "DNS names and IP addresses deputy is reached at, comma-separated (default localhost,127.0.0.1)")
	f.BoolVar(&force, "force", false, "regenerate every file, including the CA and files that do not parse")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

// suggestedHost picks the host for the next-step hint: kube-apiserver does
// not resolve cluster DNS names, so an IP address is the likelier choice.
func suggestedHost(hosts []string) string {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if ip.To4() == nil {
				return "[" + h + "]"
			}
			return h
		}
	}
	if len(hosts) > 0 {
		return hosts[0]
	}
	return "HOST"
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/internal/secretfile"
	"deputy.dev/deputy/policy/v1alpha1"
)

// tokenEnv holds a bearer token for `deputy sync`, the alternative to
// --token-file (for CI, where the token is a masked variable).
const tokenEnv = "DEPUTY_TOKEN"

// maxTokenFileBytes bounds --token-file: a bearer token (a JWT of a few KiB).
const maxTokenFileBytes = 64 << 10

// defaultServer is where `deputy serve` listens by default.
const defaultServer = "https://" + config.DefaultListen

type syncFlags struct {
	dryRun        bool
	prune         bool
	revision      string
	healthTimeout string
	wait          bool
	output        string
	server        string
	tokenFile     string
	clientCert    string
	clientKey     string
	caCert        string
}

func newSyncCommand() *cobra.Command {
	var f syncFlags
	cmd := &cobra.Command{
		Use:   "sync NAMESPACE/NAME [--dry-run] [--prune] [--revision R] [--health-timeout D] [--wait] [-o json] [--server URL] [--token-file F | --client-cert F --client-key F] [--cacert F]",
		Short: "Start a sync of an Application through deputy's API, and follow it",
		Long: `Ask a running deputy to sync the Application NAMESPACE/NAME, with deputy's
own engine, as the ServiceAccount the Application's AppProject derives.

With --wait, follow the operation: a line per resource whenever its result,
health or hook phase changes (wave, kind, name, result, health), the failed
attempts that spec.syncPolicy.retry retries ("...; retrying (attempt 2 of 4)
at TIME"), then the message of a sync that did not succeed (a health timeout
names the resources that were not healthy), the phase and the identity the
cluster saw. With -o json, the final operation state (each resource with its
health) and the Application's health (applicationHealth). Exit code 0 means
the sync succeeded, 1 anything else.

Credentials, first found: --token-file, --client-cert/--client-key, the
environment variable DEPUTY_TOKEN, else the development client certificate
under .deputy/certs (what deputy serve generates; it authenticates as
kube-apiserver, which the example policy does not let sync: use
DEPUTY_TOKEN=deputy-demo-alice against make run). The caller needs, in deputy's policy, verb
create on applications/sync (group deputy.dev) in the namespace, and get on
applications to follow it.`,
		Example: `  deputy sync guestbook/guestbook --wait
  deputy sync guestbook/guestbook --dry-run --prune --wait
  deputy sync guestbook/guestbook --health-timeout 10m --wait
  DEPUTY_TOKEN=... deputy sync guestbook/guestbook --server https://deputy.example:8443 --cacert ca.crt --wait -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSync(cmd, args[0], &f)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&f.dryRun, "dry-run", false, "send every write with dryRun=All: nothing changes in the cluster")
	fs.BoolVar(&f.prune, "prune", false, "delete tracked objects that are no longer in Git")
	fs.StringVar(&f.revision, "revision", "", "sync this branch, tag or commit instead of the Application's targetRevision")
	fs.StringVar(&f.healthTimeout, "health-timeout", "", "how long this sync waits for one wave's resources to become healthy, e.g. 10m (default: the Application's spec.syncPolicy.healthTimeout, else deputy's sync.healthTimeout)")
	fs.BoolVar(&f.wait, "wait", false, "follow the operation and exit 0 only if it succeeded")
	fs.StringVarP(&f.output, "output", "o", "", `"json": print the operation state as JSON (the final one with --wait)`)
	fs.StringVar(&f.server, "server", defaultServer, "deputy's URL")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding a bearer token (else $"+tokenEnv+")")
	fs.StringVar(&f.clientCert, "client-cert", "", "client certificate signed by deputy's client CA (default: "+filepath.Join(config.DefaultCertDir, certs.ClientCertFile)+" when no token is given)")
	fs.StringVar(&f.clientKey, "client-key", "", "private key of --client-cert")
	fs.StringVar(&f.caCert, "cacert", filepath.Join(config.DefaultCertDir, certs.CACertFile), "CA certificate that signed deputy's serving certificate")
	return cmd
}

// parseAppRef splits NAMESPACE/NAME.
func parseAppRef(ref string) (string, string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("name the Application as NAMESPACE/NAME, e.g. guestbook/guestbook (got %q)", ref)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", "", fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	return ns, name, nil
}

// syncClientOptions resolves the credentials (see the command's help).
func syncClientOptions(cmd *cobra.Command, f *syncFlags) (apiclient.Options, error) {
	opts := apiclient.Options{Server: f.server, CAFile: f.caCert}
	changed := cmd.Flags().Changed
	if !changed("cacert") && !fileExists(f.caCert) {
		opts.CAFile = "" // no development CA here: the system roots
	}
	explicitCert := changed("client-cert") || changed("client-key")
	switch {
	case f.tokenFile != "" && explicitCert:
		return opts, errors.New("use --token-file or --client-cert/--client-key, not both")
	case f.tokenFile != "":
		data, err := secretfile.ReadTrimmed(f.tokenFile, maxTokenFileBytes)
		if err != nil {
			return opts, fmt.Errorf("failed to read --token-file: %w", err)
		}
		if opts.Token = string(data); opts.Token == "" {
			return opts, fmt.Errorf("--token-file %s is empty", f.tokenFile)
		}
	case explicitCert:
		if f.clientCert == "" || f.clientKey == "" {
			return opts, errors.New("--client-cert and --client-key go together")
		}
		opts.CertFile, opts.KeyFile = f.clientCert, f.clientKey
	case strings.TrimSpace(os.Getenv(tokenEnv)) != "":
		opts.Token = strings.TrimSpace(os.Getenv(tokenEnv))
	default:
		cert, key := filepath.Join(config.DefaultCertDir, certs.ClientCertFile), filepath.Join(config.DefaultCertDir, certs.ClientKeyFile)
		if fileExists(cert) && fileExists(key) {
			opts.CertFile, opts.KeyFile = cert, key
		}
	}
	return opts, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func runSync(cmd *cobra.Command, ref string, f *syncFlags) error {
	ns, name, err := parseAppRef(ref)
	if err != nil {
		return err
	}
	if f.output != "" && f.output != "json" {
		return fmt.Errorf("--output %q: the only format is json", f.output)
	}
	op := v1alpha1.SyncOperation{Revision: f.revision, Prune: f.prune, DryRun: f.dryRun, HealthTimeout: f.healthTimeout}
	if _, err := v1alpha1.ParseHealthTimeout(f.healthTimeout, nil); err != nil {
		return fmt.Errorf("--health-timeout %q: %s", f.healthTimeout, err.Detail)
	}
	opts, err := syncClientOptions(cmd, f)
	if err != nil {
		return err
	}
	client, err := apiclient.New(opts)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	started, err := client.Sync(ctx, ns, name, op)
	if err != nil {
		return explainAPIError(err, opts)
	}
	if !f.wait {
		if f.output == "json" {
			return printJSON(out, started)
		}
		fmt.Fprintf(out, "sync of %s/%s started (%s)\n", ns, name, started.Phase)
		return nil
	}
	progress := newProgressPrinter(out)
	final, err := client.Watch(ctx, ns, name, func(ev v1alpha1.OperationEvent) error {
		if f.output == "" {
			progress.event(ev)
		}
		return nil
	})
	if err != nil {
		return explainAPIError(err, opts)
	}
	if f.output == "json" {
		if err := printJSON(out, finalJSON{OperationState: final, ApplicationHealth: applicationHealth(ctx, client, ns, name, final)}); err != nil {
			return err
		}
	} else {
		if final.Phase != v1alpha1.OperationSucceeded && final.Message != "" {
			fmt.Fprintln(out, strings.TrimRight(final.Message, "\n"))
		}
		fmt.Fprintln(out, finalLine(final))
		for _, line := range outOfSyncLines(final) {
			fmt.Fprintln(out, line)
		}
	}
	if final.Phase != v1alpha1.OperationSucceeded {
		return exitError{code: 1}
	}
	return nil
}

// finalLine is "Succeeded as system:serviceaccount:guestbook:guestbook-deployer".
func finalLine(s *v1alpha1.OperationState) string {
	line := s.Phase
	if s.Operation.Sync != nil && s.Operation.Sync.DryRun {
		line += " (dry run)"
	}
	if s.Identity != "" {
		line += " as " + s.Identity
	}
	return line
}

// outOfSyncLines say, after a sync that leaves the Application OutOfSync
// (v1alpha1.SyncStatusAfter), which objects it tracks but no longer renders
// are still there, and how to delete them.
func outOfSyncLines(final *v1alpha1.OperationState) []string {
	st, ok := v1alpha1.SyncStatusAfter(final)
	if !ok || st.Status != v1alpha1.SyncStatusCodeOutOfSync {
		return nil
	}
	left := v1alpha1.PruneSkipped(final)
	hint := "sync with --prune to delete them"
	if final.Operation.Sync != nil && final.Operation.Sync.Prune {
		hint = "each line says why prune left it"
	}
	what := fmt.Sprintf("%d resources are", len(left))
	if len(left) == 1 {
		what = "1 resource is"
	}
	lines := []string{fmt.Sprintf("OutOfSync: %s no longer in Git but still there (%s):", what, hint)}
	for _, r := range left {
		lines = append(lines, "  "+resourceLine(r))
	}
	return lines
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// devCAFile is the CA certificate deputy serve generates with its
// development certificates (tls.certDir's default), which --cacert
// defaults to when it exists.
var devCAFile = filepath.Join(config.DefaultCertDir, certs.CACertFile)

// explainAPIError adds what to do to deputy's refusals and to an untrusted
// serving certificate.
func explainAPIError(err error, opts apiclient.Options) error {
	var certErr *apiclient.CertificateError
	if errors.As(err, &certErr) {
		return explainCertificateError(certErr)
	}
	var apiErr *apiclient.StatusError
	if !errors.As(err, &apiErr) {
		return err
	}
	switch apiErr.Status.Code {
	case http.StatusUnauthorized:
		how := "no credentials were sent"
		switch {
		case opts.Token != "":
			how = "the bearer token was not accepted"
		case opts.CertFile != "":
			how = "the client certificate " + opts.CertFile + " was not accepted"
		}
		return fmt.Errorf("%s (%s; use --token-file, $%s, or --client-cert/--client-key)", apiErr.Status.Message, how, tokenEnv)
	case http.StatusForbidden:
		if strings.Contains(apiErr.Status.Message, "the project token of AppProject") {
			// A project token's scope, not a missing grant.
			return fmt.Errorf("%s\n(a project token acts only on its own project's Applications: use that project's token)", apiErr.Status.Message)
		}
		if opts.Token == "" && opts.CertFile == filepath.Join(config.DefaultCertDir, certs.ClientCertFile) {
			// No credential was given: deputy sync fell back to the
			// development client certificate, whose identity is
			// kube-apiserver's.
			return fmt.Errorf("%s\n(no credential given, so deputy sync used the development client certificate %s, which authenticates as kube-apiserver: "+
				"use your own, e.g. $%s=deputy-demo-alice against make run, or --token-file)", apiErr.Status.Message, opts.CertFile, tokenEnv)
		}
		return fmt.Errorf("%s\n(grant verb create on applications/sync and get on applications, group deputy.dev, in deputy's policy)", apiErr.Status.Message)
	}
	return err
}

// explainCertificateError says how to make deputy's serving certificate
// verify: --cacert with the CA that signed it, and where that CA is.
func explainCertificateError(e *apiclient.CertificateError) error {
	if !e.UnknownAuthority() {
		return fmt.Errorf("%w\n(the certificate must name the host of --server and be valid now: "+
			"renew it with deputy certs init --dir DIR --hosts HOST, or use --server with a host it names)", e)
	}
	given := "--cacert " + e.CAFile + " is not the CA that signed it"
	if e.CAFile == "" {
		given = "no --cacert was given and " + devCAFile + " does not exist here"
	}
	return fmt.Errorf("%w\n(%s: pass deputy's CA with --cacert FILE. "+
		"deputy serve's development certificates: %s under the directory deputy serve runs in (tls.certDir; deputy certs init --dir DIR writes DIR/%s); "+
		"in a cluster: kubectl -n deputy-system get secret deputy-serving-cert -o jsonpath='{.data.ca\\.crt}' | base64 -d > ca.crt)",
		e, given, devCAFile, certs.CACertFile)
}

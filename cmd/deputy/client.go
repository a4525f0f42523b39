package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/internal/secretfile"
)

// tokenEnv holds a bearer token for deputy's client commands (`deputy
// sync`, `deputy diff`), the alternative to --token-file (for CI, where the
// token is a masked variable).
const tokenEnv = "DEPUTY_TOKEN"

// maxTokenFileBytes bounds --token-file: a bearer token (a JWT of a few KiB).
const maxTokenFileBytes = 64 << 10

// defaultServer is where `deputy serve` listens by default.
const defaultServer = "https://" + config.DefaultListen

// credentialsHelp is the part of a client command's help about
// credentials; the command's name and the grant it needs complete it.
const credentialsHelp = `Credentials, first found: --token-file, --client-cert/--client-key, the
environment variable DEPUTY_TOKEN, else the development client certificate
under .deputy/certs (what deputy serve generates; it authenticates as
kube-apiserver, which the example policy does not let sync or diff: use
DEPUTY_TOKEN=deputy-demo-alice against make run).`

// clientFlags are the connection and credential flags of deputy's client
// commands.
type clientFlags struct {
	server     string
	tokenFile  string
	clientCert string
	clientKey  string
	caCert     string
}

// register adds the flags to fs.
func (f *clientFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.server, "server", defaultServer, "deputy's URL")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding a bearer token (else $"+tokenEnv+")")
	fs.StringVar(&f.clientCert, "client-cert", "", "client certificate signed by deputy's client CA (default: "+filepath.Join(config.DefaultCertDir, certs.ClientCertFile)+" when no token is given)")
	fs.StringVar(&f.clientKey, "client-key", "", "private key of --client-cert")
	fs.StringVar(&f.caCert, "cacert", filepath.Join(config.DefaultCertDir, certs.CACertFile), "CA certificate that signed deputy's serving certificate")
}

// apiCall names what a client command asks of deputy's API, for the hints
// of explainAPIError.
type apiCall struct {
	// command is the command line, e.g. "deputy sync".
	command string
	// grant is what the policy must grant the caller.
	grant string
}

var (
	syncCall = apiCall{command: "deputy sync", grant: "verb create on applications/sync and get on applications"}
	diffCall = apiCall{command: "deputy diff", grant: "verb get on applications/diff"}
)

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

// clientOptions resolves the credentials (see credentialsHelp).
func clientOptions(cmd *cobra.Command, f *clientFlags) (apiclient.Options, error) {
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

// newClient is the API client of f's flags.
//
// Errors: clientOptions' and apiclient.New's.
func newClient(cmd *cobra.Command, f *clientFlags) (*apiclient.Client, apiclient.Options, error) {
	opts, err := clientOptions(cmd, f)
	if err != nil {
		return nil, opts, err
	}
	client, err := apiclient.New(opts)
	return client, opts, err
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// devCAFile is the CA certificate deputy serve generates with its
// development certificates (tls.certDir's default), which --cacert
// defaults to when it exists.
var devCAFile = filepath.Join(config.DefaultCertDir, certs.CACertFile)

// explainAPIError adds what to do to deputy's refusals of call and to an
// untrusted serving certificate.
func explainAPIError(err error, opts apiclient.Options, call apiCall) error {
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
			// No credential was given: the command fell back to the
			// development client certificate, whose identity is
			// kube-apiserver's.
			return fmt.Errorf("%s\n(no credential given, so %s used the development client certificate %s, which authenticates as kube-apiserver: "+
				"use your own, e.g. $%s=deputy-demo-alice against make run, or --token-file)", apiErr.Status.Message, call.command, opts.CertFile, tokenEnv)
		}
		return fmt.Errorf("%s\n(grant %s, group deputy.dev, in deputy's policy)", apiErr.Status.Message, call.grant)
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

package serve

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"deputy.dev/deputy/certs"
	"deputy.dev/deputy/config"
	"deputy.dev/deputy/webhook"
)

// tlsFiles are the certificate files Run serves with, resolved from the tls
// section.
type tlsFiles struct {
	certFile, keyFile string
	// clientCA is "" when client certificates are not required.
	clientCA     string
	allowedNames []string
}

// resolveCertificates resolves the serving certificate and the client CA:
// tls.certFile and tls.keyFile when set, else those of tls.certDir,
// generated there (development certificates) when they do not exist; the
// certificate directory's CA is the client CA when tls.clientCAFile is not
// set, with deputy's own client name allowed unless
// tls.allowedClientNames says otherwise.
//
// Errors: the development certificates cannot be generated.
func resolveCertificates(cfg *config.DeputyConfiguration, log *slog.Logger) (tlsFiles, Serving, error) {
	serving := Serving{}
	f := tlsFiles{certFile: cfg.TLS.CertFile, keyFile: cfg.TLS.KeyFile, clientCA: cfg.TLS.ClientCAFile, allowedNames: cfg.TLS.AllowedClientNames}
	if f.certFile == "" {
		dir := cfg.TLS.CertDir
		serving.CertDir = dir
		f.certFile, f.keyFile = filepath.Join(dir, certs.ServingCertFile), filepath.Join(dir, certs.ServingKeyFile)
		if !fileExists(f.certFile) || !fileExists(f.keyFile) {
			res, err := certs.Init(dir, certs.InitOptions{})
			if err != nil {
				return tlsFiles{}, Serving{}, fmt.Errorf("failed to generate development certificates in %s: %w", dir, err)
			}
			serving.GeneratedCerts = res.Changed()
			log.Info("generated development certificates", "dir", dir, "hosts", res.Hosts)
		}
		if f.clientCA == "" && fileExists(filepath.Join(dir, certs.CACertFile)) {
			f.clientCA = filepath.Join(dir, certs.CACertFile)
			if len(f.allowedNames) == 0 {
				f.allowedNames = []string{config.DefaultClientName}
			}
		}
	}
	serving.ClientCAFile = f.clientCA
	return f, serving, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startClientCA loads the client CA (reloaded on change until ctx ends): the
// authentication of /authorize, /authenticate and /validate, and the
// verification of client certificates on deputy's API. Both are nil when no
// client CA is configured.
//
// Errors: the client CA cannot be read, naming the setting.
func startClientCA(ctx context.Context, f tlsFiles, log *slog.Logger) (*webhook.ClientCertAuth, x509request.VerifyOptionFunc, error) {
	if f.clientCA == "" {
		return nil, nil, nil
	}
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", f.clientCA)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to load client CA %s (tls.clientCAFile / --client-ca-file): %w", f.clientCA, err)
	}
	go ca.Run(ctx, 1)
	return webhook.NewClientCertAuth(ca.VerifyOptions, f.allowedNames, log), ca.VerifyOptions, nil
}

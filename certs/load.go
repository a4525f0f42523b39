package certs

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"deputy.dev/deputy/internal/secretfile"
)

// APIServerClient is what kube-apiserver needs to call deputy, as PEM: the CA
// that signed deputy's serving certificate, and the client certificate and
// key kube-apiserver presents.
type APIServerClient struct {
	// CA is the content of CACertFile.
	CA []byte
	// Cert is the content of ClientCertFile.
	Cert []byte
	// Key is the content of ClientKeyFile.
	Key []byte
}

// LoadAPIServerClient reads CACertFile, ClientCertFile and ClientKeyFile from
// dir (as written by Init) and checks that they parse, that the key belongs to
// the certificate, and that the certificate verifies against the CA for client
// authentication at the current time.
//
// Errors name the file. A missing file's error wraps fs.ErrNotExist so a
// caller can suggest running Init; other problems suggest rerunning Init
// (with --force for a corrupt file).
func LoadAPIServerClient(dir string) (APIServerClient, error) {
	return loadAPIServerClient(dir, time.Now())
}

func loadAPIServerClient(dir string, now time.Time) (APIServerClient, error) {
	var out APIServerClient
	var errs []error
	read := func(name string) []byte {
		data, err := secretfile.Read(filepath.Join(dir, name), secretfile.MaxBytes)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to read %s: %w", name, err))
		}
		return data
	}
	out.CA, out.Cert, out.Key = read(CACertFile), read(ClientCertFile), read(ClientKeyFile)
	if err := errors.Join(errs...); err != nil {
		return APIServerClient{}, err
	}

	cas, err := certutil.ParseCertsPEM(out.CA)
	if err != nil {
		return APIServerClient{}, corrupt(filepath.Join(dir, CACertFile), true, err)
	}
	chain, err := certutil.ParseCertsPEM(out.Cert)
	if err != nil {
		return APIServerClient{}, corrupt(filepath.Join(dir, ClientCertFile), false, err)
	}
	k, err := keyutil.ParsePrivateKeyPEM(out.Key)
	if err != nil {
		return APIServerClient{}, corrupt(filepath.Join(dir, ClientKeyFile), false, err)
	}
	key, ok := k.(crypto.Signer)
	if !ok || !keyMatches(chain[0], key) {
		return APIServerClient{}, fmt.Errorf("%s does not belong to %s: run \"deputy certs init --dir %s\" again to reissue the client certificate", filepath.Join(dir, ClientKeyFile), filepath.Join(dir, ClientCertFile), dir)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return APIServerClient{}, fmt.Errorf("%s does not verify against %s for client auth (%v): run \"deputy certs init --dir %s\" again to reissue it", filepath.Join(dir, ClientCertFile), filepath.Join(dir, CACertFile), err, dir)
	}
	return out, nil
}

// CheckServingHost verifies that the serving certificate in dir (ServingCertFile)
// covers host, the host kube-apiserver will dial: as a DNS name or IP SAN.
// A directory without ServingCertFile (deputy serves a certificate from
// elsewhere) is not checked.
//
// Errors: the certificate does not parse, or does not cover host; the latter
// names the certificate's hosts and the `deputy certs init` command that fixes
// it.
func CheckServingHost(dir, host string) error {
	path := filepath.Join(dir, ServingCertFile)
	data, err := secretfile.Read(path, secretfile.MaxBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", path, err)
	}
	parsed, err := certutil.ParseCertsPEM(data)
	if err != nil || len(parsed) == 0 {
		return fmt.Errorf("%s is not a PEM certificate: %v", path, err)
	}
	leaf := parsed[0]
	if err := leaf.VerifyHostname(host); err == nil {
		return nil
	}
	hosts := append([]string(nil), leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	return fmt.Errorf("%s covers %s, not %s: kube-apiserver would reject deputy's certificate: every impersonation would be denied (failurePolicy Deny) and deputy's other answers ignored; reissue it with: deputy certs init --dir %s --hosts %s",
		path, strings.Join(hosts, ", "), host, dir, strings.Join(append(hosts, host), ","))
}

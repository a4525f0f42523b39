package certs

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"deputy.dev/deputy/internal/secretfile"
)

// Reading back what Init wrote and deciding what to keep: a pair that is
// missing, corrupt, expiring, for other hosts or not from the CA is reissued.

// loadPair reads and parses a certificate and key. With skipParse (Force) it
// only records existence. A file that exists but does not parse is an error
// naming the file and the fix.
func loadPair(dir, certName, keyName string, skipParse bool) (*pair, error) {
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	p := &pair{certName: certName, keyName: keyName, certPath: certPath, keyPath: keyPath}
	var errs []error

	certPEM, err := secretfile.Read(certPath, secretfile.MaxBytes)
	switch {
	case err == nil:
		p.certExists = true
		if !skipParse {
			if p.certs, err = certutil.ParseCertsPEM(certPEM); err != nil {
				errs = append(errs, corrupt(certPath, certName == CACertFile, err))
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		errs = append(errs, fmt.Errorf("failed to read certificate: %w", err))
	}

	keyPEM, err := secretfile.Read(keyPath, secretfile.MaxBytes)
	switch {
	case err == nil:
		p.keyExists = true
		if !skipParse {
			k, err := keyutil.ParsePrivateKeyPEM(keyPEM)
			if err != nil {
				errs = append(errs, corrupt(keyPath, keyName == CAKeyFile, err))
			} else if s, ok := k.(crypto.Signer); ok {
				p.key = s
			} else {
				errs = append(errs, corrupt(keyPath, keyName == CAKeyFile, fmt.Errorf("unsupported key type %T", k)))
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		errs = append(errs, fmt.Errorf("failed to read private key: %w", err))
	}
	return p, errors.Join(errs...)
}

// corrupt is the error for a file that exists but does not parse. A leaf file
// can simply be removed (Init then reissues its pair); the CA cannot, without
// invalidating kube-apiserver's configuration.
func corrupt(path string, isCA bool, err error) error {
	fix := "remove it to have it reissued"
	if isCA {
		fix = "restore it from a backup"
	}
	return fmt.Errorf("%s exists but cannot be parsed (%v): %s, or run again with --force to regenerate all certificates", path, err, fix)
}

// checkCA returns why the CA must be (re)generated, "" to keep it, or an
// error when the CA is in a state Init will not overwrite without Force.
func checkCA(ca *pair, now time.Time, renewBefore time.Duration) (string, error) {
	switch {
	case !ca.certExists && !ca.keyExists:
		return "missing", nil
	case !ca.certExists:
		return "", fmt.Errorf("%s exists but %s is missing: restore %s, or run again with --force to regenerate all certificates", ca.keyPath, ca.certPath, ca.certName)
	case !ca.keyExists:
		return "", fmt.Errorf("%s exists but %s is missing (it is needed to issue certificates): restore %s, or run again with --force to regenerate all certificates", ca.certPath, ca.keyPath, ca.keyName)
	}
	c := ca.cert()
	if !c.IsCA || !c.BasicConstraintsValid {
		return "", fmt.Errorf("%s is not a CA certificate (basicConstraints CA:TRUE is missing): replace it with a CA, or run again with --force to regenerate all certificates", ca.certPath)
	}
	if !keyMatches(c, ca.key) {
		return "", fmt.Errorf("%s does not belong to %s (the public keys differ): restore the matching pair, or run again with --force to regenerate all certificates", ca.keyPath, ca.certPath)
	}
	return expiryReason(c, now, renewBefore), nil
}

// checkLeaf returns why a leaf must be reissued, "" to keep it.
func checkLeaf(p *pair, ca *x509.Certificate, usage x509.ExtKeyUsage, now time.Time, renewBefore time.Duration) string {
	switch {
	case !p.certExists && !p.keyExists:
		return "missing"
	case !p.certExists:
		return p.certName + " is missing"
	case !p.keyExists:
		return p.keyName + " is missing"
	}
	c := p.cert()
	if !keyMatches(c, p.key) {
		return p.keyName + " does not match the certificate"
	}
	if reason := expiryReason(c, now, renewBefore); reason != "" {
		return reason
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, ic := range p.certs[1:] {
		inter.AddCert(ic)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Sprintf("it does not verify against %s for %s (%v)", CACertFile, usageName(usage), err)
	}
	return ""
}

// checkHosts returns why the serving certificate does not cover hosts, "" if it does.
func checkHosts(c *x509.Certificate, hosts []string) string {
	var missing []string
	for _, h := range hosts {
		if !covers(c, h) {
			missing = append(missing, h)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("it does not cover host(s) %s", strings.Join(missing, ", "))
}

func covers(c *x509.Certificate, host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		for _, have := range c.IPAddresses {
			if have.Equal(ip) {
				return true
			}
		}
		return false
	}
	for _, have := range c.DNSNames {
		if strings.EqualFold(have, host) {
			return true
		}
	}
	return !strings.HasPrefix(host, "*.") && c.VerifyHostname(host) == nil
}

// expiryReason says why c must be renewed at now: expired, not yet valid, or
// within min(renewBefore, lifetime/3) of expiry.
func expiryReason(c *x509.Certificate, now time.Time, renewBefore time.Duration) string {
	if now.Before(c.NotBefore) {
		return fmt.Sprintf("it is not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	}
	if !now.Before(c.NotAfter) {
		return fmt.Sprintf("it expired %s", c.NotAfter.UTC().Format(time.RFC3339))
	}
	window := renewBefore
	if third := c.NotAfter.Sub(c.NotBefore) / 3; third < window {
		window = third
	}
	if !now.Before(c.NotAfter.Add(-window)) {
		return fmt.Sprintf("it expires %s", c.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

func keyMatches(c *x509.Certificate, key crypto.Signer) bool {
	pub, ok := c.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(key.Public())
}

func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageClientAuth {
		return "client auth"
	}
	return "server auth"
}

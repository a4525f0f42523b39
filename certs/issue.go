package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Issuing: the CA, the serving and the client certificate, each with a new
// EC P-256 key.

func servingTemplate(hosts []string) *x509.Certificate {
	t := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "deputy"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			t.IPAddresses = append(t.IPAddresses, ip)
		} else {
			t.DNSNames = append(t.DNSNames, h)
		}
	}
	return t
}

func clientTemplate() *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: ClientCommonName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

func issueCA(now time.Time, validity time.Duration) (*issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	t := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("deputy-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(t, t, key, key)
}

func issueLeaf(ca *x509.Certificate, caKey crypto.Signer, t *x509.Certificate, now time.Time, validity time.Duration) (*issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate key: %w", err)
	}
	if t.SerialNumber, err = serialNumber(); err != nil {
		return nil, err
	}
	t.NotBefore = now.Add(-backdate)
	t.NotAfter = now.Add(validity)
	if t.NotAfter.After(ca.NotAfter) {
		t.NotAfter = ca.NotAfter
	}
	return sign(t, ca, key, caKey)
}

func sign(t, parent *x509.Certificate, key *ecdsa.PrivateKey, signer crypto.Signer) (*issued, error) {
	der, err := x509.CreateCertificate(rand.Reader, t, parent, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("failed to sign certificate %q: %w", t.Subject.CommonName, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("failed to parse new certificate: %w", err)
	}
	certPEM, err := certutil.EncodeCertificates(c)
	if err != nil {
		return nil, fmt.Errorf("failed to encode certificate: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, fmt.Errorf("failed to encode private key: %w", err)
	}
	return &issued{cert: c, certPEM: certPEM, key: key, keyPEM: keyPEM}, nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("failed to generate serial number: %w", err)
	}
	return n, nil
}

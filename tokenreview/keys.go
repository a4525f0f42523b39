package tokenreview

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"

	"deputy.dev/deputy/internal/secretfile"
)

// SigningKey is the EC P-256 private key that signs project tokens (ES256).
type SigningKey struct {
	key   *ecdsa.PrivateKey
	keyID string
}

// KeyID is the key's kid: the unpadded base64url SHA-256 of its public key's
// DER (PKIX) encoding, as kube-apiserver derives the kid of its service
// account keys.
func (k *SigningKey) KeyID() string { return k.keyID }

// Public returns the verification key of k.
func (k *SigningKey) Public() *VerificationKey {
	return &VerificationKey{key: &k.key.PublicKey, keyID: k.keyID}
}

// VerificationKey is an EC P-256 public key that project tokens may be signed
// with.
type VerificationKey struct {
	key   *ecdsa.PublicKey
	keyID string
}

// KeyID is the key's kid (see SigningKey.KeyID).
func (k *VerificationKey) KeyID() string { return k.keyID }

// keyID is kube-apiserver's keyIDFromPublicKey: base64url(sha256(PKIX DER)).
func keyID(pub *ecdsa.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("failed to encode the public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// GenerateSigningKey creates a new P-256 signing key and returns it with its
// PEM encodings: the private key (PKCS#8, "PRIVATE KEY") and the public key
// (PKIX, "PUBLIC KEY").
func GenerateSigningKey() (key *SigningKey, privatePEM, publicPEM []byte, err error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("failed to generate a P-256 key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("failed to encode the private key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("failed to encode the public key: %w", err)
	}
	key, err = newSigningKey(priv)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

func newSigningKey(priv *ecdsa.PrivateKey) (*SigningKey, error) {
	if priv.Curve != elliptic.P256() {
		return nil, fmt.Errorf("the key is on curve %s: project tokens are ES256 and need a P-256 key (deputy token keygen)", priv.Curve.Params().Name)
	}
	kid, err := keyID(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	return &SigningKey{key: priv, keyID: kid}, nil
}

// LoadSigningKey reads a PEM EC P-256 private key ("EC PRIVATE KEY" or PKCS#8
// "PRIVATE KEY").
//
// Errors: the file cannot be read, holds no such key, or the key is not
// P-256; each names the file.
func LoadSigningKey(path string) (*SigningKey, error) {
	data, err := secretfile.Read(path, secretfile.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("failed to read the project token signing key: %w", err)
	}
	key, err := ParseSigningKey(data)
	if err != nil {
		return nil, fmt.Errorf("project token signing key %s: %w", path, err)
	}
	return key, nil
}

// ParseSigningKey parses PEM data as LoadSigningKey does.
func ParseSigningKey(data []byte) (*SigningKey, error) {
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		var priv any
		var err error
		switch block.Type {
		case "EC PRIVATE KEY":
			priv, err = x509.ParseECPrivateKey(block.Bytes)
		case "PRIVATE KEY":
			priv, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("invalid %s block: %w", block.Type, err)
		}
		ec, ok := priv.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("the private key is a %T: project tokens are ES256 and need an EC P-256 key (deputy token keygen)", priv)
		}
		return newSigningKey(ec)
	}
	return nil, errors.New(`no PEM "EC PRIVATE KEY" or "PRIVATE KEY" block: give an EC P-256 private key (deputy token keygen writes one)`)
}

// LoadVerificationKey reads a PEM EC P-256 public key ("PUBLIC KEY"), or the
// public half of a private key file.
//
// Errors: the file cannot be read or holds no P-256 key; each names the file.
func LoadVerificationKey(path string) (*VerificationKey, error) {
	data, err := secretfile.Read(path, secretfile.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("failed to read the project token verification key: %w", err)
	}
	key, err := ParseVerificationKey(data)
	if err != nil {
		return nil, fmt.Errorf("project token verification key %s: %w", path, err)
	}
	return key, nil
}

// ParseVerificationKey parses PEM data as LoadVerificationKey does.
func ParseVerificationKey(data []byte) (*VerificationKey, error) {
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "PUBLIC KEY" {
			continue
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("invalid PUBLIC KEY block: %w", err)
		}
		ec, ok := pub.(*ecdsa.PublicKey)
		if !ok || ec.Curve != elliptic.P256() {
			return nil, fmt.Errorf("the public key is a %T, not EC P-256: project tokens are ES256", pub)
		}
		kid, err := keyID(ec)
		if err != nil {
			return nil, err
		}
		return &VerificationKey{key: ec, keyID: kid}, nil
	}
	if priv, err := ParseSigningKey(data); err == nil {
		return priv.Public(), nil
	}
	return nil, errors.New(`no PEM "PUBLIC KEY" block (nor an EC P-256 private key): give the public key deputy token keygen wrote`)
}

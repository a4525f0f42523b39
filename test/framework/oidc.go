package framework

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// OIDCIssuer is a local HTTPS OpenID provider for tests: it serves a
// discovery document and a JWKS with one ES256 key, and mints ID tokens.
type OIDCIssuer struct {
	srv *httptest.Server
	key *ecdsa.PrivateKey
	kid string
}

// StartOIDCIssuer starts the issuer on 127.0.0.1 with a self-signed
// certificate (see WriteCA).
func StartOIDCIssuer() (*OIDCIssuer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	iss := &OIDCIssuer{key: key, kid: "e2e-key-1"}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                iss.URL(),
			"jwks_uri":                              iss.URL() + "/keys",
			"authorization_endpoint":                iss.URL() + "/authorize",
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"ES256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &key.PublicKey, KeyID: iss.kid, Algorithm: string(jose.ES256), Use: "sig"},
		}})
	})
	iss.srv = httptest.NewTLSServer(mux)
	return iss, nil
}

// URL is the issuer URL (https://127.0.0.1:PORT).
func (i *OIDCIssuer) URL() string { return i.srv.URL }

// Close stops the issuer.
func (i *OIDCIssuer) Close() { i.srv.Close() }

// WriteCA writes the issuer's serving certificate (PEM) to dir/name and
// returns the path, for certificateAuthorityFile.
func (i *OIDCIssuer) WriteCA(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.srv.Certificate().Raw})
	return p, os.WriteFile(p, data, 0o600)
}

// IDToken mints an ID token for sub with groups, for audience aud, valid from
// issuedAt for ttl.
func (i *OIDCIssuer) IDToken(aud, sub string, groups []string, issuedAt time.Time, ttl time.Duration) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: i.key, KeyID: i.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	claims := struct {
		jwt.Claims
		Groups []string `json:"groups,omitempty"`
	}{
		Claims: jwt.Claims{Issuer: i.URL(), Subject: sub, Audience: jwt.Audience{aud},
			IssuedAt: jwt.NewNumericDate(issuedAt), NotBefore: jwt.NewNumericDate(issuedAt), Expiry: jwt.NewNumericDate(issuedAt.Add(ttl))},
		Groups: groups,
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		return "", fmt.Errorf("failed to sign the ID token: %w", err)
	}
	return tok, nil
}

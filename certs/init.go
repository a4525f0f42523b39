package certs

import (
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// File names Init writes under its directory. The serving pair uses the names
// cert-manager and Kubernetes TLS Secrets use (tls.crt/tls.key), so a mounted
// Secret can replace Init's output unchanged.
const (
	// CACertFile is the CA certificate: kube-apiserver trusts it for deputy's
	// serving certificate, deputy trusts it for kube-apiserver's client certificate.
	CACertFile = "ca.crt"
	// CAKeyFile is the CA private key; only Init needs it (to issue leaves).
	CAKeyFile = "ca.key"
	// ServingCertFile is deputy's HTTPS serving certificate.
	ServingCertFile = "tls.crt"
	// ServingKeyFile is the private key of ServingCertFile.
	ServingKeyFile = "tls.key"
	// ClientCertFile is the client certificate kube-apiserver presents to deputy.
	ClientCertFile = "kube-apiserver-client.crt"
	// ClientKeyFile is the private key of ClientCertFile.
	ClientKeyFile = "kube-apiserver-client.key"
)

// ClientCommonName is the subject CN of the client certificate Init issues for
// kube-apiserver; deputy's server can require it.
const ClientCommonName = "kube-apiserver"

// Defaults of InitOptions.
const (
	// DefaultCAValidity is how long a new CA certificate is valid.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultLeafValidity is how long a new serving or client certificate is valid.
	DefaultLeafValidity = 365 * 24 * time.Hour
	// DefaultRenewBefore is how long before expiry an existing certificate is
	// replaced (capped at a third of its lifetime, as cert-manager does).
	DefaultRenewBefore = 30 * 24 * time.Hour
)

// DefaultHosts are the serving certificate's SANs when InitOptions.Hosts is empty.
var DefaultHosts = []string{"localhost", "127.0.0.1"}

const (
	modeDir  fs.FileMode = 0o700
	modeKey  fs.FileMode = 0o600
	modeCert fs.FileMode = 0o644
	// backdate tolerates clock skew between this host and the verifier.
	backdate = 5 * time.Minute
)

// InitOptions tunes Init. The zero value is valid: default hosts and validities.
type InitOptions struct {
	// Hosts are the serving certificate's subject alternative names: an entry
	// that parses as an IP address becomes an IP SAN, anything else a DNS SAN
	// (a DNS-1123 subdomain, optionally with a leading "*."). Empty means
	// DefaultHosts.
	Hosts []string
	// Force regenerates every file, including the CA and corrupt files.
	Force bool
	// CAValidity is the lifetime of a new CA (default DefaultCAValidity).
	CAValidity time.Duration
	// LeafValidity is the lifetime of a new serving or client certificate
	// (default DefaultLeafValidity), capped at the CA's expiry.
	LeafValidity time.Duration
	// RenewBefore replaces an existing certificate that expires within this
	// window (default DefaultRenewBefore; capped at a third of the certificate's
	// lifetime so short-lived certificates are not reissued on every run).
	RenewBefore time.Duration

	// now is the clock; nil means time.Now. Tests set it.
	now func() time.Time
}

// Action is what Init did with one file.
type Action string

// Actions reported in FileResult.
const (
	// ActionCreated: the file did not exist and was written.
	ActionCreated Action = "created"
	// ActionReissued: the file existed and was replaced; FileResult.Reason says why.
	ActionReissued Action = "reissued"
	// ActionKept: the file existed, was valid and was left byte-for-byte unchanged.
	ActionKept Action = "kept"
)

// FileResult reports one file handled by Init.
type FileResult struct {
	// Name is the file's base name, e.g. CACertFile.
	Name string
	// Path is Name joined to Init's directory.
	Path string
	// Action is what Init did.
	Action Action
	// Reason explains a reissue ("expires 2026-01-02", "does not cover host x",
	// "--force"); empty otherwise.
	Reason string
}

// InitResult reports what Init did, one entry per file in a fixed order: CA,
// serving, client; certificate before key.
type InitResult struct {
	// Dir is the directory Init worked in.
	Dir string
	// Hosts are the normalised hosts the serving certificate was checked or
	// issued for (DefaultHosts when none were given).
	Hosts []string
	// Files lists all six files.
	Files []FileResult
	// CAChanged is true when ca.crt was created or reissued: kube-apiserver's
	// configuration (which embeds the CA) must be generated and installed again.
	CAChanged bool
	// Warnings are problems Init did not fix, e.g. a kept key file readable by
	// other users.
	Warnings []string
}

// Changed reports whether Init wrote any file.
func (r InitResult) Changed() bool {
	for _, f := range r.Files {
		if f.Action != ActionKept {
			return true
		}
	}
	return false
}

// File returns the result for the file with base name name.
func (r InitResult) File(name string) (FileResult, bool) {
	for _, f := range r.Files {
		if f.Name == name {
			return f, true
		}
	}
	return FileResult{}, false
}

// pair is a certificate and its key as found on disk.
type pair struct {
	certName, keyName string
	certPath, keyPath string
	certExists        bool
	keyExists         bool
	certs             []*x509.Certificate // leaf first
	key               crypto.Signer
}

func (p *pair) cert() *x509.Certificate {
	if len(p.certs) == 0 {
		return nil
	}
	return p.certs[0]
}

// issued is a freshly generated certificate and key.
type issued struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	keyPEM  []byte
}

// Init makes sure dir holds a CA, a serving certificate for opts.Hosts and a
// client certificate for kube-apiserver (see the *File constants), all ECDSA
// P-256 in PEM, keys mode 0600 and certificates 0644. It creates dir with mode
// 0700 if missing.
//
// Init is idempotent: files that parse, chain to the CA, are not within
// RenewBefore of expiry and (serving certificate) cover every requested host
// are kept unchanged. Otherwise it reissues what is needed: a valid CA is kept
// and only the leaves are reissued; a CA that expires is regenerated together
// with both leaves. opts.Force regenerates everything.
//
// Errors: invalid options or hosts; a file that exists but does not parse, a
// ca.crt that is not a CA, a CA key that does not match the CA certificate, or
// half a CA (one of ca.crt/ca.key missing while the other exists): these name
// the file and the fix (--force) and are never overwritten without Force.
// All such problems are reported together, before anything is written. I/O
// errors name the path. Each file is written atomically (temporary file and
// rename).
func Init(dir string, opts InitOptions) (InitResult, error) {
	if dir == "" {
		return InitResult{}, errors.New("certificate directory is empty: pass the directory to write the certificates to (--dir)")
	}
	hosts, err := normalizeHosts(opts.Hosts)
	if err != nil {
		return InitResult{}, err
	}
	if err := opts.complete(); err != nil {
		return InitResult{}, err
	}
	if err := ensureDir(dir); err != nil {
		return InitResult{}, err
	}
	now := opts.now()

	ca, err := loadPair(dir, CACertFile, CAKeyFile, opts.Force)
	serving, err2 := loadPair(dir, ServingCertFile, ServingKeyFile, opts.Force)
	client, err3 := loadPair(dir, ClientCertFile, ClientKeyFile, opts.Force)
	if err := errors.Join(err, err2, err3); err != nil {
		return InitResult{}, err
	}

	// Decide.
	var caReason, servingReason, clientReason string
	if opts.Force {
		caReason, servingReason, clientReason = "--force", "--force", "--force"
	} else {
		caReason, err = checkCA(ca, now, opts.RenewBefore)
		if err != nil {
			return InitResult{}, err
		}
		if caReason != "" {
			servingReason, clientReason = "the CA is new", "the CA is new"
		} else {
			servingReason = checkLeaf(serving, ca.cert(), x509.ExtKeyUsageServerAuth, now, opts.RenewBefore)
			if servingReason == "" {
				servingReason = checkHosts(serving.cert(), hosts)
			}
			clientReason = checkLeaf(client, ca.cert(), x509.ExtKeyUsageClientAuth, now, opts.RenewBefore)
			if clientReason == "" && client.cert().Subject.CommonName != ClientCommonName {
				clientReason = fmt.Sprintf("its subject CN is %q, not %q", client.cert().Subject.CommonName, ClientCommonName)
			}
		}
	}

	// Issue.
	res := InitResult{Dir: dir, Hosts: hosts}
	caCert, caKey := ca.cert(), ca.key
	var newCA, newServing, newClient *issued
	if caReason != "" {
		if newCA, err = issueCA(now, opts.CAValidity); err != nil {
			return InitResult{}, err
		}
		caCert, caKey = newCA.cert, newCA.key
	}
	if servingReason != "" {
		if newServing, err = issueLeaf(caCert, caKey, servingTemplate(hosts), now, opts.LeafValidity); err != nil {
			return InitResult{}, err
		}
	}
	if clientReason != "" {
		if newClient, err = issueLeaf(caCert, caKey, clientTemplate(), now, opts.LeafValidity); err != nil {
			return InitResult{}, err
		}
	}

	// Write: keys before certificates, the CA before the leaves it signs.
	for _, step := range []struct {
		p      *pair
		is     *issued
		reason string
	}{{ca, newCA, caReason}, {serving, newServing, servingReason}, {client, newClient, clientReason}} {
		results, err := writePair(dir, step.p, step.is, step.reason)
		if err != nil {
			return res, err
		}
		res.Files = append(res.Files, results...)
	}
	res.CAChanged = newCA != nil
	res.Warnings = keyPermissionWarnings(res.Files)
	return res, nil
}

func (o *InitOptions) complete() error {
	if o.CAValidity < 0 || o.LeafValidity < 0 || o.RenewBefore < 0 {
		return fmt.Errorf("certificate validity and renew-before durations must not be negative (got CA %s, leaf %s, renew-before %s)", o.CAValidity, o.LeafValidity, o.RenewBefore)
	}
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.LeafValidity == 0 {
		o.LeafValidity = DefaultLeafValidity
	}
	if o.RenewBefore == 0 {
		o.RenewBefore = DefaultRenewBefore
	}
	if o.now == nil {
		o.now = time.Now
	}
	return nil
}

// normalizeHosts trims, lower-cases DNS names, canonicalises IPs, drops
// duplicates and validates; empty input gives DefaultHosts.
func normalizeHosts(in []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	var errs []error
	for _, h := range in {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		} else {
			h = strings.ToLower(h)
			msgs := validation.IsDNS1123Subdomain(h)
			if strings.HasPrefix(h, "*.") {
				msgs = validation.IsWildcardDNS1123Subdomain(h)
			}
			if len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("host %q is neither an IP address nor a valid DNS name: %s", h, strings.Join(msgs, "; ")))
				continue
			}
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return append([]string(nil), DefaultHosts...), nil
	}
	return out, nil
}

func ensureDir(dir string) error {
	info, err := os.Stat(dir)
	switch {
	case err == nil && !info.IsDir():
		return fmt.Errorf("%s exists and is not a directory: choose another certificate directory", dir)
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("failed to inspect certificate directory: %w", err)
	}
	if err := os.MkdirAll(dir, modeDir); err != nil {
		return fmt.Errorf("failed to create certificate directory: %w", err)
	}
	return nil
}

// writePair writes is (if non-nil) over p's files, key first, and reports both.
func writePair(dir string, p *pair, is *issued, reason string) ([]FileResult, error) {
	certRes := FileResult{Name: p.certName, Path: filepath.Join(dir, p.certName), Action: ActionKept}
	keyRes := FileResult{Name: p.keyName, Path: filepath.Join(dir, p.keyName), Action: ActionKept}
	if is == nil {
		return []FileResult{certRes, keyRes}, nil
	}
	if err := WriteFileAtomic(keyRes.Path, is.keyPEM, modeKey); err != nil {
		return nil, err
	}
	if err := WriteFileAtomic(certRes.Path, is.certPEM, modeCert); err != nil {
		return nil, err
	}
	certRes.Action, certRes.Reason = action(p.certExists, reason)
	keyRes.Action, keyRes.Reason = action(p.keyExists, reason)
	return []FileResult{certRes, keyRes}, nil
}

func action(existed bool, reason string) (Action, string) {
	if !existed {
		return ActionCreated, ""
	}
	return ActionReissued, reason
}

func keyPermissionWarnings(files []FileResult) []string {
	var out []string
	for _, f := range files {
		if f.Action != ActionKept || !strings.HasSuffix(f.Name, ".key") {
			continue
		}
		info, err := os.Stat(f.Path)
		if err != nil {
			continue
		}
		if info.Mode().Perm()&0o077 != 0 {
			out = append(out, fmt.Sprintf("%s is readable by other users (mode %04o): run \"chmod 600 %s\"", f.Path, info.Mode().Perm(), f.Path))
		}
	}
	return out
}

// WriteFileAtomic writes data to a temporary file next to path, sets mode,
// syncs and renames it over path, so readers (deputy's certificate and policy
// watchers among them) see the old or the new content, never a partial file.
//
// Errors: any I/O failure, naming path; the temporary file is removed then.
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("failed to set mode of %s: %w", path, err)
	}
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("failed to write %s: %w", path, err)
	}
	return nil
}

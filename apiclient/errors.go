package apiclient

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StatusError is an answer other than success: the metav1.Status deputy sent
// (or one made from the status line when the body is not a Status).
type StatusError struct {
	Status metav1.Status
}

func (e *StatusError) Error() string { return e.Status.Message }

// errorBodyLimit bounds how much of an error body is read.
const errorBodyLimit = 64 << 10

// readStatusError turns a response other than 2xx into a *StatusError.
func readStatusError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
	var st metav1.Status
	if err := json.Unmarshal(data, &st); err == nil && st.Kind == "Status" && st.Message != "" {
		return &StatusError{Status: st}
	}
	msg := strings.TrimSpace(string(data))
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &StatusError{Status: metav1.Status{Status: metav1.StatusFailure, Code: int32(resp.StatusCode),
		Message: fmt.Sprintf("deputy answered %s: %s", resp.Status, msg)}}
}

// CertificateError is a failure to verify deputy's serving certificate: it
// is signed by a CA the client does not trust (the usual case: deputy's own
// CA was not given), names other hosts, or is not valid now.
type CertificateError struct {
	// Server is deputy's URL.
	Server string
	// CAFile is the CA file the certificate was verified with; "" means the
	// system's trusted roots.
	CAFile string
	// Err is crypto/x509's error: x509.UnknownAuthorityError,
	// x509.HostnameError or x509.CertificateInvalidError.
	Err error
}

func (e *CertificateError) Error() string {
	roots := "the system's trusted CAs"
	if e.CAFile != "" {
		roots = "the CA in " + e.CAFile
	}
	return fmt.Sprintf("failed to reach deputy at %s: its serving certificate does not verify with %s: %v", e.Server, roots, e.Err)
}

func (e *CertificateError) Unwrap() error { return e.Err }

// UnknownAuthority reports whether the certificate is signed by a CA the
// client was not given (rather than naming other hosts, or having expired).
func (e *CertificateError) UnknownAuthority() bool {
	var unknown x509.UnknownAuthorityError
	return errors.As(e.Err, &unknown)
}

// asCertificateError returns the certificate verification failure inside a
// transport error, or nil.
func asCertificateError(err error) *CertificateError {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknown):
		return &CertificateError{Err: unknown}
	case errors.As(err, &hostname):
		return &CertificateError{Err: hostname}
	case errors.As(err, &invalid):
		return &CertificateError{Err: invalid}
	}
	return nil
}

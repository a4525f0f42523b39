package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// Body limits. kube-apiserver's own limits for these objects are in the same
// range: SubjectAccessReview and TokenReview bodies are a few hundred bytes
// (a user with many groups or extras stays far below 1 MiB), while an
// AdmissionReview carries the object and its old version, each up to etcd's
// ~1.5 MiB request limit after JSON expansion, hence controller-runtime's 7 MiB.
// A larger body is answered 413 before it is read further.
const (
	maxSubjectAccessReviewBytes = 1 << 20
	maxTokenReviewBytes         = 1 << 20
	maxAdmissionReviewBytes     = 7 << 20
)

// statusError is a client mistake answered with an HTTP status and a
// metav1.Status body, the way kube-apiserver answers bad requests.
type statusError struct {
	code    int
	reason  metav1.StatusReason
	message string
}

func (e *statusError) Error() string { return e.message }

func badRequest(format string, args ...any) *statusError {
	return &statusError{code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest, message: fmt.Sprintf(format, args...)}
}

// readReviewBody enforces the transport rules shared by the review endpoints
// and returns the body. Errors are *statusError: 405 for a method other than
// POST, 415 for a content type other than application/json, 400 for an empty
// or unreadable body, 413 above limit bytes.
func readReviewBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *statusError) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, &statusError{code: http.StatusMethodNotAllowed, reason: metav1.StatusReasonMethodNotAllowed,
			message: fmt.Sprintf("method %s is not allowed: review endpoints accept POST", r.Method)}
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return nil, &statusError{code: http.StatusUnsupportedMediaType, reason: metav1.StatusReasonUnsupportedMediaType,
			message: fmt.Sprintf("unsupported content type %q: send application/json", ct)}
	}
	body, serr := readLimitedBody(w, r, limit)
	if serr != nil {
		return nil, serr
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("request body is empty: send a JSON review object")
	}
	return body, nil
}

// readLimitedBody reads the whole body, answering 413 for a declared or
// actual length above limit (the body is not read further) and 400 when it
// cannot be read.
func readLimitedBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *statusError) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		return nil, badRequest("failed to read request body: %v", err)
	}
	return body, nil
}

func tooLarge(limit int64) *statusError {
	return &statusError{code: http.StatusRequestEntityTooLarge, reason: metav1.StatusReasonRequestEntityTooLarge,
		message: fmt.Sprintf("request body is larger than the limit of %d bytes", limit)}
}

// typeMeta is what is read first to pick the version to decode.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// peekTypeMeta reads apiVersion and kind.
func peekTypeMeta(body []byte) (typeMeta, *statusError) {
	var tm typeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &tm); err != nil {
		return tm, badRequest("request body is not a JSON object: %v", err)
	}
	return tm, nil
}

// decodeInto decodes case-sensitively like kube-apiserver (so a v1beta1
// "group" never lands in a v1 "groups"); unknown fields are ignored so newer
// kube-apiservers that add fields keep working.
func decodeInto(body []byte, into any, what string) *statusError {
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, into); err != nil {
		return badRequest("failed to decode %s: %v", what, err)
	}
	return nil
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writeJSON encodes v and writes it with status code. A failed write (the
// client went away) is not an error anyone can act on: it is dropped, never
// panicked on.
func writeJSON(w http.ResponseWriter, code int, v any) {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufPool.Put(buf)
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		// Only reachable through a programming error; answer without a body.
		http.Error(w, "failed to encode response", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// writeStatus answers err as a metav1.Status, like kube-apiserver.
func writeStatus(w http.ResponseWriter, err *statusError) {
	writeJSON(w, err.code, &metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  err.message,
		Reason:   err.reason,
		Code:     int32(err.code),
	})
}

func unsupportedType(tm typeMeta, want string) *statusError {
	if tm.APIVersion == "" || tm.Kind == "" {
		return badRequest("apiVersion and kind are required: send %s", want)
	}
	return badRequest("unsupported apiVersion/kind %q/%q: this endpoint accepts %s", tm.APIVersion, tm.Kind, want)
}

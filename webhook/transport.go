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

// readReviewBody enforces the transport rules shared by the review endpoints
// and returns the body. Errors are *statusError: 405 for a method other than
// POST, 415 for a content type other than application/json, 400 for an empty
// or unreadable body, 413 above limit bytes.
func readReviewBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *statusError) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, newStatusError(http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
			fmt.Sprintf("method %s is not allowed: review endpoints accept POST", r.Method))
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return nil, newStatusError(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("unsupported content type %q: send application/json", ct))
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
	return newStatusError(http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
		fmt.Sprintf("request body is larger than the limit of %d bytes", limit))
}

// reviewType is what one review endpoint accepts: one kind in the versions
// v1 and v1beta1 (answered in the request's version), with a body limit.
type reviewType struct {
	kind, v1, v1beta1 string
	limit             int64
	// accepts names what the endpoint accepts, for error messages.
	accepts string
}

// decodeReview is the prologue every review endpoint shares: it reads the
// body under the transport rules (readReviewBody, rt.limit), decodes it once
// into into (a pointer to the review type of either version: their JSON
// shapes differ at most in field names the handler reads itself) and checks
// that tm, into's apiVersion and kind, is rt's kind in one of its versions.
// On false the request has been answered (a metav1.Status, see
// reviewType.decode) and the handler must return.
func decodeReview(w http.ResponseWriter, r *http.Request, rt *reviewType, into any, tm *metav1.TypeMeta) bool {
	body, serr := readReviewBody(w, r, rt.limit)
	if serr == nil {
		serr = rt.decode(body, into, tm)
	}
	if serr != nil {
		writeStatus(w, serr)
		return false
	}
	return true
}

// decode decodes body into into case-sensitively like kube-apiserver (so a
// v1beta1 "group" never lands in a v1 "groups"), ignoring unknown fields so
// that newer kube-apiservers that add fields keep working, in one pass: the
// hot path of /authorize. Errors, all 400, first match wins: the body is not
// a JSON object; apiVersion and kind are missing or not rt's; the decode
// error of a body of rt's kind.
func (rt *reviewType) decode(body []byte, into any, tm *metav1.TypeMeta) *statusError {
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, into); err != nil {
		peeked, serr := peekTypeMeta(body)
		if serr == nil {
			serr = rt.check(peeked)
		}
		if serr == nil {
			serr = badRequest("failed to decode %s: %v", rt.kind, err)
		}
		return serr
	}
	return rt.check(typeMeta{APIVersion: tm.APIVersion, Kind: tm.Kind})
}

// check answers nil for rt's kind in one of its versions.
func (rt *reviewType) check(tm typeMeta) *statusError {
	switch {
	case tm.APIVersion == "" || tm.Kind == "":
		return badRequest("apiVersion and kind are required: send %s", rt.accepts)
	case tm.Kind != rt.kind || (tm.APIVersion != rt.v1 && tm.APIVersion != rt.v1beta1):
		return badRequest("unsupported apiVersion/kind %q/%q: this endpoint accepts %s", tm.APIVersion, tm.Kind, rt.accepts)
	}
	return nil
}

// typeMeta is what is read of a body that cannot be decoded, to tell a body
// that is not a review object from one of the wrong kind.
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

package webhook

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusError is every error answer deputy writes over HTTP (except the
// plain-text health endpoints): an HTTP status code and a metav1.Status body,
// the way kube-apiserver answers. It has the two wire shapes kube-apiserver
// has:
//   - the short one, code, reason and message (newStatusError, badRequest):
//     the transport's answers to client mistakes (405, 413, 415, 400),
//     client-certificate 401s, a recovered panic's 500;
//   - the detailed one of k8s.io/apimachinery/pkg/api/errors, which adds
//     details (group, kind, name, causes) for deputy's API and the Git push
//     webhook (fromAPIError), optionally with deputy's own message
//     (withMessage).
//
// writeStatus writes either.
type statusError struct {
	status metav1.Status
}

// Error returns the message the answer carries.
func (e *statusError) Error() string { return e.status.Message }

// code is the HTTP status code of the answer.
func (e *statusError) code() int { return int(e.status.Code) }

// newStatusError is an answer of the short shape.
func newStatusError(code int, reason metav1.StatusReason, message string) *statusError {
	return &statusError{status: metav1.Status{Status: metav1.StatusFailure, Message: message, Reason: reason, Code: int32(code)}}
}

// badRequest is a 400 of the short shape with a formatted message.
func badRequest(format string, args ...any) *statusError {
	return newStatusError(http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf(format, args...))
}

// fromAPIError is err, built with k8s.io/apimachinery/pkg/api/errors (or
// k8s.io/apiserver's responsewriters), as kube-apiserver writes it.
func fromAPIError(err *apierrors.StatusError) *statusError {
	return &statusError{status: err.Status()}
}

// withMessage replaces the answer's message (apierrors' constructors prefix
// or compose their own); an empty message keeps it.
func (e *statusError) withMessage(message string) *statusError {
	if message != "" {
		e.status.Message = message
	}
	return e
}

// writeStatus answers err as a metav1.Status, like kube-apiserver.
func writeStatus(w http.ResponseWriter, err *statusError) {
	st := err.status
	st.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	writeJSON(w, err.code(), &st)
}

package webhook

import (
	"log/slog"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

const (
	arV1      = "admission.k8s.io/v1"
	arV1beta1 = "admission.k8s.io/v1beta1"
	arKind    = "AdmissionReview"
)

var admissionReviewType = reviewType{kind: arKind, v1: arV1, v1beta1: arV1beta1,
	limit: maxAdmissionReviewBytes, accepts: "admission.k8s.io/v1 or v1beta1 AdmissionReview"}

// ValidateHandler answers AdmissionReviews (POST /validate) with a
// controller-runtime admission.Handler run through admission.Webhook.Handle,
// which recovers panics and completes the response (uid copied, patch type).
// The transport around it is deputy's shared one, because controller-runtime's
// own ServeHTTP answers malformed requests with HTTP 200 and content-type
// mistakes with 400 rather than 415. The answer is an AdmissionReview of the
// request's apiVersion with request.uid echoed; a validating webhook returns
// no patch.
type ValidateHandler struct {
	Webhook *admission.Webhook
	Metrics *Metrics
	Log     *slog.Logger
}

// NewValidateHandler wraps h.
func NewValidateHandler(h admission.Handler, m *Metrics, log *slog.Logger) *ValidateHandler {
	return &ValidateHandler{Webhook: &admission.Webhook{Handler: h}, Metrics: m, Log: log}
}

// ServeHTTP implements http.Handler.
func (h *ValidateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// v1beta1 and v1 AdmissionReview have the same JSON shape.
	var review admissionv1.AdmissionReview
	if !decodeReview(w, r, &admissionReviewType, &review, &review.TypeMeta) {
		return
	}
	if review.Request == nil {
		writeStatus(w, badRequest("AdmissionReview request is required"))
		return
	}
	if review.Request.UID == "" {
		writeStatus(w, badRequest("AdmissionReview request.uid is required: the response must echo it"))
		return
	}
	resp := h.Webhook.Handle(r.Context(), admission.Request{AdmissionRequest: *review.Request})
	resp.UID = review.Request.UID
	resp.Patch, resp.PatchType, resp.Patches = nil, nil, nil

	decision := "denied"
	if resp.Allowed {
		decision = "allowed"
	}
	h.Metrics.decision("validate", decision)
	if !resp.Allowed {
		msg := ""
		if resp.Result != nil {
			msg = resp.Result.Message
		}
		h.Log.Info("admission denied", "requestID", requestID(r.Context()), "kind", review.Request.Kind.Kind,
			"namespace", review.Request.Namespace, "name", review.Request.Name, "operation", string(review.Request.Operation),
			"user", review.Request.UserInfo.Username, "message", msg)
	}

	if review.APIVersion == arV1 {
		writeJSON(w, http.StatusOK, &admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: arV1, Kind: arKind}, Response: &resp.AdmissionResponse,
		})
		return
	}
	out := admissionv1beta1.AdmissionResponse{
		UID: resp.UID, Allowed: resp.Allowed, Result: resp.Result, Warnings: resp.Warnings, AuditAnnotations: resp.AuditAnnotations,
	}
	writeJSON(w, http.StatusOK, &admissionv1beta1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: arV1beta1, Kind: arKind}, Response: &out,
	})
}

package webhook

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authenticationv1beta1 "k8s.io/api/authentication/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"deputy.dev/deputy/tokenreview"
)

const (
	trV1      = "authentication.k8s.io/v1"
	trV1beta1 = "authentication.k8s.io/v1beta1"
	trKind    = "TokenReview"
)

var tokenReviewType = reviewType{kind: trKind, v1: trV1, v1beta1: trV1beta1,
	limit: maxTokenReviewBytes, accepts: "authentication.k8s.io/v1 or v1beta1 TokenReview"}

// TokenReviewer answers a TokenReview spec; tokenreview.Reviewer implements it.
// An error means the request itself is invalid (answered 400); authenticator
// faults belong in status.error.
type TokenReviewer interface {
	Review(ctx context.Context, spec authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error)
}

// AuthenticateHandler answers TokenReviews (POST /authenticate) in the
// request's version, as kube-apiserver's token webhook authenticator expects
// (plugin/pkg/auth/authenticator/token/webhook). The response carries only
// metadata and status: the token is never echoed back, and never logged.
type AuthenticateHandler struct {
	Reviewer TokenReviewer
	Metrics  *Metrics
	Log      *slog.Logger
	// APIAudiences are the audiences static tokens are valid for; with
	// KnownToken they let an audience mismatch be explained in the log.
	APIAudiences []string
	// KnownToken, if set, reports whether a static token exists regardless
	// of audiences and whose it is (no token is ever logged).
	KnownToken func(token string) (userName string, ok bool)
}

// ServeHTTP implements http.Handler.
func (h *AuthenticateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// v1 and v1beta1 TokenReview have identical JSON shapes.
	var tr authenticationv1.TokenReview
	if !decodeReview(w, r, &tokenReviewType, &tr, &tr.TypeMeta) {
		return
	}
	status, err := h.Reviewer.Review(r.Context(), tr.Spec)
	switch {
	case errors.Is(err, tokenreview.ErrTokenRequired):
		// kube-apiserver's own message, verbatim (apierrors.NewBadRequest).
		writeStatus(w, badRequest("%v", err))
		return
	case err != nil:
		// Not the caller's mistake (an authenticator answered for audiences
		// it was not asked about): report it as an authentication error, which
		// kube-apiserver neither caches nor treats as a rejection of the token.
		status = authenticationv1.TokenReviewStatus{Error: err.Error()}
	}
	if !status.Authenticated && status.Error == "" && h.KnownToken != nil && len(tr.Spec.Audiences) > 0 {
		// The most common first-hour mistake: kube-apiserver asks for its own
		// API audiences, which deputy's static tokens are not valid for.
		if name, ok := h.KnownToken(tr.Spec.Token); ok {
			h.Log.Warn("a static token was presented for audiences it is not valid for; set deputy's --api-audiences (authentication.apiAudiences) to kube-apiserver's --api-audiences (by default its --service-account-issuer)",
				"requestID", requestID(r.Context()), "user", name, "requestedAudiences", tr.Spec.Audiences, "apiAudiences", h.APIAudiences)
		}
	}
	label := "unauthenticated"
	switch {
	case status.Error != "":
		label = "error"
	case status.Authenticated:
		label = "authenticated"
	}
	h.Metrics.decision("authenticate", label)
	if status.Error != "" {
		h.Log.Warn("token authentication error", "requestID", requestID(r.Context()), "error", status.Error)
	} else if h.Log.Enabled(r.Context(), slog.LevelDebug) {
		h.Log.Debug("token review", "requestID", requestID(r.Context()), "result", label, "user", status.User.Username)
	}
	meta := metav1.ObjectMeta{Name: tr.Name, UID: tr.UID, CreationTimestamp: tr.CreationTimestamp}
	if tr.APIVersion == trV1 {
		writeJSON(w, http.StatusOK, &authenticationv1.TokenReview{
			TypeMeta: metav1.TypeMeta{APIVersion: trV1, Kind: trKind}, ObjectMeta: meta, Status: status,
		})
		return
	}
	writeJSON(w, http.StatusOK, &authenticationv1beta1.TokenReview{
		TypeMeta: metav1.TypeMeta{APIVersion: trV1beta1, Kind: trKind}, ObjectMeta: meta, Status: statusToV1beta1(status),
	})
}

func statusToV1beta1(s authenticationv1.TokenReviewStatus) authenticationv1beta1.TokenReviewStatus {
	out := authenticationv1beta1.TokenReviewStatus{
		Authenticated: s.Authenticated,
		Audiences:     s.Audiences,
		Error:         s.Error,
		User: authenticationv1beta1.UserInfo{
			Username: s.User.Username,
			UID:      s.User.UID,
			Groups:   s.User.Groups,
		},
	}
	if len(s.User.Extra) > 0 {
		out.User.Extra = make(map[string]authenticationv1beta1.ExtraValue, len(s.User.Extra))
		for k, v := range s.User.Extra {
			out.User.Extra[k] = authenticationv1beta1.ExtraValue(v)
		}
	}
	return out
}

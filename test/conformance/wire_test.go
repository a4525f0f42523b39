package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sarBody is req as deputy's /authorize receives it from kube-apiserver:
// authorization.k8s.io/v1, or v1beta1 (where the groups field is "group").
func sarBody(req Request) ([]byte, error) {
	if !req.V1beta1 {
		return json.Marshal(&authorizationv1.SubjectAccessReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
			Spec:     req.Spec,
		})
	}
	s := req.Spec
	spec := authorizationv1beta1.SubjectAccessReviewSpec{User: s.User, Groups: s.Groups, UID: s.UID}
	if ra := s.ResourceAttributes; ra != nil {
		v := authorizationv1beta1.ResourceAttributes(*ra)
		spec.ResourceAttributes = &v
	}
	if nra := s.NonResourceAttributes; nra != nil {
		v := authorizationv1beta1.NonResourceAttributes(*nra)
		spec.NonResourceAttributes = &v
	}
	return json.Marshal(&authorizationv1beta1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1beta1", Kind: "SubjectAccessReview"},
		Spec:     spec,
	})
}

// sarAnswer is the status of a SubjectAccessReview response (identical in
// both versions).
type sarAnswer struct {
	Allowed         bool   `json:"allowed"`
	Denied          bool   `json:"denied"`
	Reason          string `json:"reason"`
	EvaluationError string `json:"evaluationError"`
}

func (a sarAnswer) String() string {
	s := fmt.Sprintf("allowed=%v denied=%v reason=%q", a.Allowed, a.Denied, a.Reason)
	if a.EvaluationError != "" {
		s += fmt.Sprintf(" evaluationError=%q", a.EvaluationError)
	}
	return s
}

// askDeputy posts req to an /authorize handler and decodes the answer,
// checking that it comes back in the version it was asked in.
func askDeputy(do func(*http.Request) (*http.Response, error), url string, req Request) (sarAnswer, error) {
	body, err := sarBody(req)
	if err != nil {
		return sarAnswer{}, err
	}
	hreq, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return sarAnswer{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := do(hreq)
	if err != nil {
		return sarAnswer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return sarAnswer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return sarAnswer{}, fmt.Errorf("deputy answered %d: %s", resp.StatusCode, data)
	}
	var out struct {
		APIVersion string    `json:"apiVersion"`
		Status     sarAnswer `json:"status"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return sarAnswer{}, fmt.Errorf("failed to decode deputy's answer: %w", err)
	}
	want := "authorization.k8s.io/v1"
	if req.V1beta1 {
		want = "authorization.k8s.io/v1beta1"
	}
	if out.APIVersion != want {
		return sarAnswer{}, fmt.Errorf("deputy answered in %q, want %q", out.APIVersion, want)
	}
	return out.Status, nil
}

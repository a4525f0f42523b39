package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	authorizationv1beta1 "k8s.io/api/authorization/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kjson "sigs.k8s.io/json"

	"deputy.dev/deputy/tokenreview"
)

// malformedSeeds are the client mistakes every decoder must answer with a 4xx.
func malformedSeeds(group, kind, top string) []string {
	return []string{
		"", " \n\t", "hello", "[]", `[{}]`, "null", "true", "0", `""`, "{}", "{", `{"apiVersion":`,
		`{"apiVersion":"v1","kind":"Pod"}`,
		fmt.Sprintf(`{"apiVersion":"%s/v2","kind":"%s"}`, group, kind),
		fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"Status"}`, group),
		fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"%s"}`, group, kind),
		fmt.Sprintf(`{"apiVersion":"%s/v1beta1","kind":"%s","%s":null}`, group, kind, top),
		fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"%s","%s":"x"}`, group, kind, top),
		fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"%s","%s":{}}`, group, kind, top),
		fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"%s","%s":[]}`, group, kind, top),
		fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"%s","metadata":{"creationTimestamp":"yesterday"}}`, group, kind),
		fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"%s"} {}`, group, kind),
		fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"%s","apiVersion":"v1"}`, group, kind),
		fmt.Sprintf("{\"apiVersion\":\"%s/v1\",\"kind\":\"%s\",\"%s\":{\"\xff\":\"\xfe\"}}", group, kind, top),
		fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"%s","%s":%s1%s}`, group, kind, top, strings.Repeat("[", 200), strings.Repeat("]", 200)),
	}
}

// fuzzServe posts body to h, with or without a known length.
func fuzzServe(t *testing.T, h http.Handler, path string, body []byte, chunked bool) response {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if chunked {
		r.Body = io.NopCloser(unknownLength{bytes.NewReader(body)})
		r.ContentLength = -1
		r.TransferEncoding = []string{"chunked"}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// checkFuzzAnswer asserts what holds for every answer: 200 or 4xx, JSON, a
// metav1.Status for errors, and a 200 answer of the request's apiVersion and
// kind. It returns whether the answer is a 200.
func checkFuzzAnswer(t *testing.T, req []byte, got response) bool {
	t.Helper()
	if got.code != http.StatusOK && (got.code < 400 || got.code > 499) {
		t.Fatalf("status code %d for a client's body, want 200 or 4xx; body: %s", got.code, got.body)
	}
	if ct := got.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json", ct)
	}
	if !json.Valid(got.body) {
		t.Fatalf("the answer is not valid JSON: %q", got.body)
	}
	if got.code != http.StatusOK {
		var st metav1.Status
		if err := kjson.UnmarshalCaseSensitivePreserveInts(got.body, &st); err != nil {
			t.Fatalf("the error answer is not a metav1.Status: %v: %s", err, got.body)
		}
		if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure || int(st.Code) != got.code || st.Reason == "" || st.Message == "" {
			t.Fatalf("the error answer is not a complete Failure status for %d: %s", got.code, got.body)
		}
		return false
	}
	var in, out typeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(req, &in); err != nil {
		t.Fatalf("a body that is not a JSON object was answered 200: %v", err)
	}
	if err := json.Unmarshal(got.body, &out); err != nil {
		t.Fatal(err)
	}
	if in != out {
		t.Fatalf("answered %s/%s to a %s/%s", out.APIVersion, out.Kind, in.APIVersion, in.Kind)
	}
	return true
}

// fuzzAuthorizer decides by a hash of the request, so every decision and an
// evaluation error are all reached.
func fuzzAuthorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		h := fnv.New32a()
		_, _ = io.WriteString(h, a.GetUser().GetName()+"\x00"+a.GetVerb()+"\x00"+a.GetPath()+"\x00"+a.GetResource())
		switch h.Sum32() % 4 {
		case 0:
			return authorizer.DecisionAllow, "allowed by the fuzz authorizer", nil
		case 1:
			return authorizer.DecisionDeny, "denied by the fuzz authorizer", nil
		case 2:
			return authorizer.DecisionNoOpinion, "", errors.New("fuzz evaluation error")
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

func FuzzAuthorize(f *testing.F) {
	for _, s := range append(malformedSeeds("authorization.k8s.io", "SubjectAccessReview", "spec"),
		sarV1Body, sarV1beta1Body,
		`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/api","verb":"get"},"groups":["system:authenticated"]}}`,
		`{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"impersonate","resource":"serviceaccounts","namespace":"ns","name":"deployer"},"group":["ops"]}}`,
		`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"get"},"nonResourceAttributes":{"verb":"get"},"user":"a"}}`,
		`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"get"}}}`,
		`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"get","fieldSelector":{"rawSelector":"a=b"}},"user":"a","extra":{"k":null}}}`,
		`{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":{"nonResourceAttributes":{},"groups":["system:masters"]}}`,
		`{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"nonResourceAttributes":{},"user":"a"},"status":{"allowed":true,"denied":true}}`,
	) {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	h := &AuthorizeHandler{Authorizer: fuzzAuthorizer(), Metrics: NewMetrics(), Log: discardLog()}
	f.Fuzz(func(t *testing.T, body []byte, chunked bool) {
		got := fuzzServe(t, h, "/authorize", body, chunked)
		if !checkFuzzAnswer(t, body, got) {
			return
		}
		var tm typeMeta
		_ = json.Unmarshal(got.body, &tm)
		switch tm.APIVersion {
		case sarV1:
			var in, out authorizationv1.SubjectAccessReview
			mustDecode(t, body, &in)
			mustDecode(t, got.body, &out)
			checkSARAnswer(t, in.Spec, out.Spec, out.Status.Allowed, out.Status.Denied, in.Spec.User, len(in.Spec.Groups))
		case sarV1beta1:
			var in, out authorizationv1beta1.SubjectAccessReview
			mustDecode(t, body, &in)
			mustDecode(t, got.body, &out)
			checkSARAnswer(t, in.Spec, out.Spec, out.Status.Allowed, out.Status.Denied, in.Spec.User, len(in.Spec.Groups))
		default:
			t.Fatalf("answered 200 with apiVersion %q", tm.APIVersion)
		}
	})
}

func checkSARAnswer[S any](t *testing.T, in, out S, allowed, denied bool, userName string, groups int) {
	t.Helper()
	if diff := cmp.Diff(in, out); diff != "" {
		t.Fatalf("the answer does not echo the spec (-request +answer):\n%s", diff)
	}
	if allowed && denied {
		t.Fatal("the answer is both allowed and denied")
	}
	if userName == "" && groups == 0 {
		t.Fatal("a review without user and groups was answered")
	}
}

func mustDecode(t *testing.T, b []byte, into any) {
	t.Helper()
	if err := kjson.UnmarshalCaseSensitivePreserveInts(b, into); err != nil {
		t.Fatalf("failed to decode %T: %v\n%s", into, err, b)
	}
}

// fuzzTokenAuthenticator authenticates tokens by prefix: "good" for the
// audiences under review, "aud" for an unrelated audience (a fault), "err"
// with an error; anything else is unknown.
func fuzzTokenAuthenticator() authenticator.Token {
	return authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		auds, _ := authenticator.AudiencesFrom(ctx)
		switch {
		case strings.HasPrefix(token, "good"):
			return &authenticator.Response{User: &user.DefaultInfo{Name: "alice", Groups: []string{"dev"}}, Audiences: auds}, true, nil
		case strings.HasPrefix(token, "aud"):
			return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}, Audiences: authenticator.Audiences{"elsewhere"}}, true, nil
		case strings.HasPrefix(token, "err"):
			return nil, false, errors.New("fuzz authenticator fault")
		}
		return nil, false, nil
	})
}

func FuzzAuthenticate(f *testing.F) {
	for _, s := range append(malformedSeeds("authentication.k8s.io", "TokenReview", "spec"),
		trV1Body, trV1beta1Body,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"good-token","audiences":["a","b"]}}`,
		`{"apiVersion":"authentication.k8s.io/v1beta1","kind":"TokenReview","spec":{"token":"good-token"}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"aud-token"}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"err-token"}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":""}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":1}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","metadata":{"name":"n","uid":"u","creationTimestamp":"2024-01-01T00:00:00Z"},"spec":{"token":"good"}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"good"},"status":{"authenticated":true,"user":{"username":"admin","groups":["system:masters"]}}}`,
	) {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	apiAudiences := []string{"https://kubernetes.default.svc"}
	h := &AuthenticateHandler{
		Reviewer: tokenreview.NewReviewer(tokenreview.NewChain(apiAudiences, nil, fuzzTokenAuthenticator()), apiAudiences),
		Metrics:  NewMetrics(), Log: discardLog(),
	}
	f.Fuzz(func(t *testing.T, body []byte, chunked bool) {
		got := fuzzServe(t, h, "/authenticate", body, chunked)
		if !checkFuzzAnswer(t, body, got) {
			return
		}
		var in, out authenticationv1.TokenReview // v1beta1 has the same shape
		mustDecode(t, body, &in)
		mustDecode(t, got.body, &out)
		if out.Spec.Token != "" {
			t.Fatal("the answer echoes the token")
		}
		if in.Spec.Token == "" {
			t.Fatal("a review without a token was answered 200")
		}
		// A token that appears in the request only as spec.token must not
		// appear anywhere in the answer outside the reviewer's status.
		if tok := []byte(in.Spec.Token); len(tok) >= 8 && bytes.Count(body, tok) == 1 {
			var answer map[string]any
			mustDecode(t, got.body, &answer)
			delete(answer, "status")
			rest, err := json.Marshal(answer)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(rest, tok) {
				t.Fatalf("the answer contains the token %q: %s", tok, got.body)
			}
		}
		st := out.Status
		if st.Authenticated && st.Error != "" {
			t.Fatalf("authenticated with an error: %s", got.body)
		}
		if st.Authenticated {
			want := in.Spec.Audiences
			if len(want) == 0 {
				want = apiAudiences
			}
			for _, a := range st.Audiences {
				if !strings.Contains("\x00"+strings.Join(want, "\x00")+"\x00", "\x00"+a+"\x00") {
					t.Fatalf("status.audiences %q not within the audiences under review %q", st.Audiences, want)
				}
			}
			if len(st.Audiences) == 0 {
				t.Fatalf("authenticated without an audience: %s", got.body)
			}
		}
	})
}

func FuzzValidate(f *testing.F) {
	appProjectReviewBody := func(version, group, spec string) string {
		return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/%s","kind":"AdmissionReview","request":{"uid":"u-1",`+
			`"kind":{"group":%q,"version":"v1alpha1","kind":"AppProject"},"resource":{"group":%q,"version":"v1alpha1","resource":"appprojects"},`+
			`"name":"guestbook","namespace":"argocd","operation":"CREATE","userInfo":{"username":"alice"},"object":%s}}`,
			version, group, group, appProjectJSON(group, spec))
	}
	for _, s := range append(malformedSeeds("admission.k8s.io", "AdmissionReview", "request"),
		arV1Body, arV1beta1Body,
		appProjectReviewBody("v1", "argoproj.io", appProjectValidSpec),
		appProjectReviewBody("v1beta1", "deputy.dev", appProjectValidSpec),
		appProjectReviewBody("v1", "deputy.dev", appProjectStarSASpec),
		appProjectReviewBody("v1", "argoproj.io", appProjectShadowSpec),
		appProjectReviewBody("v1", "argoproj.io", `{"destinationServiceAccounts":[{"server":"!","namespace":"[","defaultServiceAccount":"a:b:c"}]}`),
		appProjectReviewBody("v1", "deputy.dev", `{"unknown":1}`),
		appProjectReviewBody("v1", "argoproj.io", `null`),
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"group":"argoproj.io","resource":"appprojects"},"operation":"UPDATE","object":1,"oldObject":"x"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"group":"rbac.authorization.k8s.io","resource":"clusterroles"},"operation":"CREATE","object":`+
			clusterRoleJSON("sa-impersonator", "", `[`+editImpersonateRule+`,{"apiGroups":["*"],"resources":["*/x"],"verbs":["impersonate-on:a:b"],"resourceNames":["*"]}]`)+`}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"group":"rbac.authorization.k8s.io","resource":"roles"},"operation":"UPDATE","object":{"rules":[{"verbs":["*"],"apiGroups":[""],"resources":["*"]}]},"oldObject":{"rules":[{"verbs":["*"],"apiGroups":[""],"resources":["*"]}]}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"group":"rbac.authorization.k8s.io","resource":"roles"},"operation":"UPDATE","object":{"rules":[]},"oldObject":7}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"},"response":{"uid":"u","allowed":true,"patch":"W10="}}`,
	) {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	// The real validators as run.go composes them (RBAC in Deny mode, which
	// also reads oldObject), with controller-runtime's panic recovery off so
	// that a panic in them fails the fuzz run instead of being answered.
	h := quietValidateHandler(NewValidator(NewAppProjectValidator(true), NewImpersonationRBACValidator("Deny")), NewMetrics())
	h.Webhook.WithRecoverPanic(false)
	f.Fuzz(func(t *testing.T, body []byte, chunked bool) {
		got := fuzzServe(t, h, "/validate", body, chunked)
		if !checkFuzzAnswer(t, body, got) {
			return
		}
		var in, out admissionv1.AdmissionReview // v1beta1 has the same shape
		mustDecode(t, body, &in)
		mustDecode(t, got.body, &out)
		if in.Request == nil || in.Request.UID == "" {
			t.Fatal("a review without a request uid was answered 200")
		}
		if out.Request != nil {
			t.Fatal("the answer echoes the request")
		}
		if out.Response == nil {
			t.Fatal("the answer has no response")
		}
		if out.Response.UID != in.Request.UID {
			t.Fatalf("response.uid = %q, want the request's %q", out.Response.UID, in.Request.UID)
		}
		if out.Response.Patch != nil || out.Response.PatchType != nil {
			t.Fatal("a validating webhook answered with a patch")
		}
		if out.Response.Result == nil {
			t.Fatal("the answer has no status")
		}
	})
}

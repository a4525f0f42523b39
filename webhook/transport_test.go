package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"deputy.dev/deputy/tokenreview"
)

// Review bodies as kube-apiserver sends them.
const (
	sarV1Body = `{
		"apiVersion": "authorization.k8s.io/v1",
		"kind": "SubjectAccessReview",
		"metadata": {"creationTimestamp": null},
		"spec": {
			"resourceAttributes": {"namespace": "team-a", "verb": "get", "group": "apps", "resource": "deployments", "subresource": "scale", "name": "web"},
			"user": "alice",
			"groups": ["dev", "system:authenticated"],
			"uid": "u-1",
			"extra": {"scopes.example.com": ["read", "write"]}
		},
		"status": {"allowed": false}
	}`
	sarV1beta1Body = `{
		"apiVersion": "authorization.k8s.io/v1beta1",
		"kind": "SubjectAccessReview",
		"spec": {
			"nonResourceAttributes": {"path": "/api", "verb": "get"},
			"user": "bob",
			"group": ["ops", "system:authenticated"],
			"extra": {"scopes.example.com": ["read"]}
		}
	}`
	trV1Body = `{
		"apiVersion": "authentication.k8s.io/v1",
		"kind": "TokenReview",
		"metadata": {"creationTimestamp": null},
		"spec": {"token": "s3cr3t-t0ken-n0t-t0-echo", "audiences": ["https://kubernetes.default.svc"]},
		"status": {"user": {}}
	}`
	trV1beta1Body = `{
		"apiVersion": "authentication.k8s.io/v1beta1",
		"kind": "TokenReview",
		"spec": {"token": "s3cr3t-t0ken-n0t-t0-echo"}
	}`
	arV1Body = `{
		"apiVersion": "admission.k8s.io/v1",
		"kind": "AdmissionReview",
		"request": {
			"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
			"kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
			"resource": {"group": "", "version": "v1", "resource": "configmaps"},
			"name": "settings",
			"namespace": "team-a",
			"operation": "CREATE",
			"userInfo": {"username": "alice", "groups": ["dev"]},
			"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team-a"}},
			"dryRun": false
		}
	}`
	arV1beta1Body = `{
		"apiVersion": "admission.k8s.io/v1beta1",
		"kind": "AdmissionReview",
		"request": {
			"uid": "705ab4f5-6393-11e8-b7cc-42010a800003",
			"kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
			"resource": {"group": "", "version": "v1", "resource": "configmaps"},
			"name": "settings",
			"namespace": "team-a",
			"operation": "DELETE",
			"userInfo": {"username": "alice"},
			"oldObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team-a"}}
		}
	}`
	secretToken = "s3cr3t-t0ken-n0t-t0-echo"
)

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// denyingAuthorizer is the default fake: it denies everything.
func denyingAuthorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionDeny, "denied by the fake", nil
	})
}

// unreachableAuthorizer fails the test when a request reaches it: the
// transport must reject the request before any decision is asked for.
func unreachableAuthorizer(t *testing.T) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		t.Error("the authorizer was asked about a request the transport must reject")
		return authorizer.DecisionDeny, "", nil
	})
}

// fakeReviewer is a TokenReviewer backed by a function; the zero value
// authenticates nobody.
type fakeReviewer func(context.Context, authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error)

func (f fakeReviewer) Review(ctx context.Context, spec authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
	if f == nil {
		return authenticationv1.TokenReviewStatus{}, nil
	}
	return f(ctx, spec)
}

func unreachableReviewer(t *testing.T) TokenReviewer {
	return fakeReviewer(func(context.Context, authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
		t.Error("the token reviewer was asked about a request the transport must reject")
		return authenticationv1.TokenReviewStatus{}, nil
	})
}

func unreachableAdmission(t *testing.T) admission.Handler {
	return admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		t.Error("the admission handler was asked about a request the transport must reject")
		return admission.Denied("unreachable")
	})
}

// quietValidateHandler is NewValidateHandler with controller-runtime's logger
// silenced (it would otherwise complain that its global logger is unset).
func quietValidateHandler(h admission.Handler, m *Metrics) *ValidateHandler {
	v := NewValidateHandler(h, m, discardLog())
	v.Webhook.LogConstructor = func(logr.Logger, *admission.Request) logr.Logger { return logr.Discard() }
	return v
}

// reviewEndpoint is one review endpoint with a handler whose backend must not
// be reached.
type reviewEndpoint struct {
	path    string
	group   string // API group of the review
	kind    string
	top     string // the top-level field carrying the review's input
	accepts string // what the endpoint says it accepts
	limit   int
	valid   string // a valid v1 body
	handler func(t *testing.T) http.Handler
}

func reviewEndpoints() []reviewEndpoint {
	return []reviewEndpoint{
		{
			path: "/authorize", group: "authorization.k8s.io", kind: "SubjectAccessReview", top: "spec",
			accepts: "authorization.k8s.io/v1 or v1beta1 SubjectAccessReview", limit: maxSubjectAccessReviewBytes, valid: sarV1Body,
			handler: func(t *testing.T) http.Handler {
				return &AuthorizeHandler{Authorizer: unreachableAuthorizer(t), Metrics: NewMetrics(), Log: discardLog()}
			},
		},
		{
			path: "/authenticate", group: "authentication.k8s.io", kind: "TokenReview", top: "spec",
			accepts: "authentication.k8s.io/v1 or v1beta1 TokenReview", limit: maxTokenReviewBytes, valid: trV1Body,
			handler: func(t *testing.T) http.Handler {
				return &AuthenticateHandler{Reviewer: unreachableReviewer(t), Metrics: NewMetrics(), Log: discardLog()}
			},
		},
		{
			path: "/validate", group: "admission.k8s.io", kind: "AdmissionReview", top: "request",
			accepts: "admission.k8s.io/v1 or v1beta1 AdmissionReview", limit: maxAdmissionReviewBytes, valid: arV1Body,
			handler: func(t *testing.T) http.Handler {
				return quietValidateHandler(unreachableAdmission(t), NewMetrics())
			},
		},
	}
}

// response is what a handler answered.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func serve(t *testing.T, h http.Handler, r *http.Request) response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func post(t *testing.T, path, contentType string, body io.Reader) *http.Request {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, body)
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	return r
}

func postJSON(t *testing.T, path, body string) *http.Request {
	t.Helper()
	return post(t, path, "application/json", strings.NewReader(body))
}

// unknownLength hides the length of a body, like a chunked request.
type unknownLength struct{ io.Reader }

func postChunked(t *testing.T, path string, body []byte) *http.Request {
	t.Helper()
	r := post(t, path, "application/json", unknownLength{bytes.NewReader(body)})
	r.ContentLength = -1
	r.TransferEncoding = []string{"chunked"}
	return r
}

// statusJSON is the metav1.Status body deputy answers client mistakes with.
func statusJSON(code int, reason metav1.StatusReason, message string) string {
	b, err := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code,
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// diffJSON compares two JSON documents by value: every field, no extra ones.
func diffJSON(t *testing.T, got []byte, want string) string {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		return fmt.Sprintf("response is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("wanted body is not JSON: %v\n%s", err, want)
	}
	return cmp.Diff(w, g)
}

func checkJSONResponse(t *testing.T, got response, wantCode int, wantBody string) {
	t.Helper()
	if got.code != wantCode {
		t.Errorf("status code = %d, want %d; body: %s", got.code, wantCode, got.body)
	}
	if ct := got.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if diff := diffJSON(t, got.body, wantBody); diff != "" {
		t.Errorf("body mismatch (-want +got):\n%s", diff)
	}
}

func TestReviewEndpointsRejectClientMistakes(t *testing.T) {
	// Placeholders: <group>, <kind>, <top>, <accepts> are the endpoint's.
	tests := []struct {
		name        string
		method      string
		contentType string
		body        string
		wantCode    int
		wantReason  metav1.StatusReason
		wantMessage string
		wantAllow   string
	}{
		{
			name: "an empty body is a bad request", body: "",
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "request body is empty: send a JSON review object",
		},
		{
			name: "a whitespace body is a bad request", body: " \n\t\r\n ",
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "request body is empty: send a JSON review object",
		},
		{
			name: "a body that is not JSON is a bad request", body: "hello=world",
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "request body is not a JSON object: invalid character 'h' looking for beginning of value",
		},
		{
			name: "a JSON array is a bad request", body: `[{"apiVersion":"<group>/v1","kind":"<kind>"}]`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "request body is not a JSON object: json: cannot unmarshal array into Go value of type webhook.typeMeta",
		},
		{
			name: "a JSON string is a bad request", body: `"<kind>"`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "request body is not a JSON object: json: cannot unmarshal string into Go value of type webhook.typeMeta",
		},
		{
			name: "JSON null is a bad request", body: `null`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "apiVersion and kind are required: send <accepts>",
		},
		{
			name: "an empty object is a bad request", body: `{}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "apiVersion and kind are required: send <accepts>",
		},
		{
			name: "a review followed by garbage is a bad request", body: `{"apiVersion":"<group>/v1","kind":"<kind>"} x`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "request body is not a JSON object: invalid character 'x' after top-level value",
		},
		{
			name: "a truncated review is a bad request", body: `{"apiVersion":"<group>/v1","kind":"<kind>","<top>":{`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "request body is not a JSON object: unexpected end of JSON input",
		},
		{
			name: "an apiVersion that is not a string is a bad request", body: `{"apiVersion":1,"kind":"<kind>"}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "request body is not a JSON object: json: cannot unmarshal number into Go struct field typeMeta.apiVersion of type string",
		},
		{
			name: "field names are case-sensitive like kube-apiserver's decoder", body: `{"APIVersion":"<group>/v1","Kind":"<kind>"}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "apiVersion and kind are required: send <accepts>",
		},
		{
			name: "an unknown apiVersion and kind is a bad request", body: `{"apiVersion":"v1","kind":"Pod"}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `unsupported apiVersion/kind "v1"/"Pod": this endpoint accepts <accepts>`,
		},
		{
			name: "the right kind in an unknown apiVersion is a bad request", body: `{"apiVersion":"<group>/v2","kind":"<kind>"}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `unsupported apiVersion/kind "<group>/v2"/"<kind>": this endpoint accepts <accepts>`,
		},
		{
			name: "the right kind without an API group is a bad request", body: `{"apiVersion":"v1","kind":"<kind>"}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `unsupported apiVersion/kind "v1"/"<kind>": this endpoint accepts <accepts>`,
		},
		{
			name: "the right apiVersion with another kind is a bad request", body: `{"apiVersion":"<group>/v1","kind":"Status"}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `unsupported apiVersion/kind "<group>/v1"/"Status": this endpoint accepts <accepts>`,
		},
		{
			name: "a kind spelled in lower case is a bad request", body: `{"apiVersion":"<group>/v1","kind":"<lowerkind>"}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `unsupported apiVersion/kind "<group>/v1"/"<lowerkind>": this endpoint accepts <accepts>`,
		},
		{
			name: "a review whose input has the wrong JSON type is a bad request", body: `{"apiVersion":"<group>/v1","kind":"<kind>","<top>":"yes"}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: "failed to decode <kind>: json: cannot unmarshal string into Go struct field <gotype>.<top> of type <toptype>",
		},
		{
			name: "another kind whose input has the wrong JSON type is answered as another kind", body: `{"apiVersion":"v1","kind":"Pod","<top>":"yes"}`,
			wantCode: 400, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: `unsupported apiVersion/kind "v1"/"Pod": this endpoint accepts <accepts>`,
		},
		{
			name: "a text/plain body is an unsupported media type", contentType: "text/plain", body: "<valid>",
			wantCode: 415, wantReason: metav1.StatusReasonUnsupportedMediaType,
			wantMessage: `unsupported content type "text/plain": send application/json`,
		},
		{
			name: "a YAML body is an unsupported media type", contentType: "application/yaml", body: "<valid>",
			wantCode: 415, wantReason: metav1.StatusReasonUnsupportedMediaType,
			wantMessage: `unsupported content type "application/yaml": send application/json`,
		},
		{
			name: "a protobuf body is an unsupported media type", contentType: "application/vnd.kubernetes.protobuf", body: "<valid>",
			wantCode: 415, wantReason: metav1.StatusReasonUnsupportedMediaType,
			wantMessage: `unsupported content type "application/vnd.kubernetes.protobuf": send application/json`,
		},
		{
			name: "a body without a content type is an unsupported media type", contentType: "-", body: "<valid>",
			wantCode: 415, wantReason: metav1.StatusReasonUnsupportedMediaType,
			wantMessage: `unsupported content type "": send application/json`,
		},
		{
			name: "a GET is a method not allowed", method: http.MethodGet, body: "",
			wantCode: 405, wantReason: metav1.StatusReasonMethodNotAllowed, wantAllow: "POST",
			wantMessage: "method GET is not allowed: review endpoints accept POST",
		},
		{
			name: "a PUT is a method not allowed", method: http.MethodPut, body: "<valid>",
			wantCode: 405, wantReason: metav1.StatusReasonMethodNotAllowed, wantAllow: "POST",
			wantMessage: "method PUT is not allowed: review endpoints accept POST",
		},
	}
	for _, ep := range reviewEndpoints() {
		toptype := map[string]string{
			"SubjectAccessReview": "webhook.subjectAccessReviewSpec",
			"TokenReview":         "v1.TokenReviewSpec",
			"AdmissionReview":     "v1.AdmissionRequest",
		}[ep.kind]
		// /authorize decodes both versions into one internal type (hot path).
		gotype := map[string]string{"SubjectAccessReview": "subjectAccessReview"}[ep.kind]
		if gotype == "" {
			gotype = ep.kind
		}
		fill := strings.NewReplacer("<gotype>", gotype, "<group>", ep.group, "<kind>", ep.kind, "<lowerkind>", strings.ToLower(ep.kind),
			"<top>", ep.top, "<accepts>", ep.accepts, "<toptype>", toptype, "<valid>", ep.valid).Replace
		for _, tc := range tests {
			t.Run(ep.path+": "+tc.name, func(t *testing.T) {
				method := tc.method
				if method == "" {
					method = http.MethodPost
				}
				r := httptest.NewRequestWithContext(t.Context(), method, ep.path, strings.NewReader(fill(tc.body)))
				switch tc.contentType {
				case "":
					r.Header.Set("Content-Type", "application/json")
				case "-":
				default:
					r.Header.Set("Content-Type", tc.contentType)
				}
				got := serve(t, ep.handler(t), r)
				checkJSONResponse(t, got, tc.wantCode, statusJSON(tc.wantCode, tc.wantReason, fill(tc.wantMessage)))
				if allow := got.header.Get("Allow"); allow != tc.wantAllow {
					t.Errorf("Allow header = %q, want %q", allow, tc.wantAllow)
				}
			})
		}
	}
}

func TestReviewEndpointsAcceptJSONContentTypeParameters(t *testing.T) {
	for _, ep := range reviewEndpoints() {
		for _, ct := range []string{"application/json; charset=utf-8", "application/json;charset=UTF-8", "Application/JSON"} {
			t.Run(ep.path+" accepts "+ct, func(t *testing.T) {
				h := map[string]http.Handler{
					"/authorize":    &AuthorizeHandler{Authorizer: denyingAuthorizer(), Metrics: NewMetrics(), Log: discardLog()},
					"/authenticate": &AuthenticateHandler{Reviewer: fakeReviewer(nil), Metrics: NewMetrics(), Log: discardLog()},
					"/validate":     quietValidateHandler(admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { return admission.Allowed("") }), NewMetrics()),
				}[ep.path]
				got := serve(t, h, post(t, ep.path, ct, strings.NewReader(ep.valid)))
				if got.code != http.StatusOK {
					t.Errorf("status code = %d, want 200; body: %s", got.code, got.body)
				}
			})
		}
	}
}

// paddedBody is a valid review of exactly size bytes: template has one %s
// that is filled with 'a's.
func paddedBody(t *testing.T, template string, size int) []byte {
	t.Helper()
	pad := size - (len(template) - 2)
	if pad < 0 {
		t.Fatalf("template is longer than %d bytes", size)
	}
	b := []byte(fmt.Sprintf(template, strings.Repeat("a", pad)))
	if len(b) != size {
		t.Fatalf("padded body has %d bytes, want %d", len(b), size)
	}
	return b
}

const (
	sarPadTemplate = `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/%s","verb":"get"},"user":"alice"}}`
	trPadTemplate  = `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"%s"}}`
	arPadTemplate  = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","operation":"CREATE","object":{"apiVersion":"v1","kind":"ConfigMap","data":{"k":"%s"}}}}`
)

func TestReviewEndpointsLimitBodySize(t *testing.T) {
	const MiB = 1 << 20
	allowAll := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	handlers := map[string]func() http.Handler{
		"/authorize": func() http.Handler {
			return &AuthorizeHandler{Authorizer: allowAll, Metrics: NewMetrics(), Log: discardLog()}
		},
		"/authenticate": func() http.Handler {
			return &AuthenticateHandler{Reviewer: fakeReviewer(nil), Metrics: NewMetrics(), Log: discardLog()}
		},
		"/validate": func() http.Handler {
			return quietValidateHandler(admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
				return admission.Allowed("")
			}), NewMetrics())
		},
	}
	tests := []struct {
		name     string
		path     string
		template string
		size     int
		chunked  bool
		wantCode int // 200 or 413
	}{
		{name: "a 2 MiB SubjectAccessReview with a Content-Length is too large", path: "/authorize", template: sarPadTemplate, size: 2 * MiB, wantCode: 413},
		{name: "a 2 MiB SubjectAccessReview of unknown length is too large", path: "/authorize", template: sarPadTemplate, size: 2 * MiB, chunked: true, wantCode: 413},
		{name: "a SubjectAccessReview of 1 MiB and one byte is too large", path: "/authorize", template: sarPadTemplate, size: MiB + 1, chunked: true, wantCode: 413},
		{name: "a SubjectAccessReview of exactly 1 MiB is answered", path: "/authorize", template: sarPadTemplate, size: MiB, wantCode: 200},
		{name: "a SubjectAccessReview of exactly 1 MiB and unknown length is answered", path: "/authorize", template: sarPadTemplate, size: MiB, chunked: true, wantCode: 200},
		{name: "a TokenReview of 1 MiB and one byte with a Content-Length is too large", path: "/authenticate", template: trPadTemplate, size: MiB + 1, wantCode: 413},
		{name: "a TokenReview of 1 MiB and one byte of unknown length is too large", path: "/authenticate", template: trPadTemplate, size: MiB + 1, chunked: true, wantCode: 413},
		{name: "a TokenReview of exactly 1 MiB is answered", path: "/authenticate", template: trPadTemplate, size: MiB, wantCode: 200},
		{name: "an 8 MiB AdmissionReview with a Content-Length is too large", path: "/validate", template: arPadTemplate, size: 8 * MiB, wantCode: 413},
		{name: "an 8 MiB AdmissionReview of unknown length is too large", path: "/validate", template: arPadTemplate, size: 8 * MiB, chunked: true, wantCode: 413},
		{name: "an AdmissionReview of 7 MiB and one byte is too large", path: "/validate", template: arPadTemplate, size: 7*MiB + 1, chunked: true, wantCode: 413},
		{name: "an AdmissionReview of exactly 7 MiB is answered", path: "/validate", template: arPadTemplate, size: 7 * MiB, wantCode: 200},
	}
	limits := map[string]int{"/authorize": maxSubjectAccessReviewBytes, "/authenticate": maxTokenReviewBytes, "/validate": maxAdmissionReviewBytes}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := paddedBody(t, tc.template, tc.size)
			var r *http.Request
			if tc.chunked {
				r = postChunked(t, tc.path, body)
			} else {
				r = post(t, tc.path, "application/json", bytes.NewReader(body))
				if r.ContentLength != int64(tc.size) {
					t.Fatalf("request ContentLength = %d, want %d", r.ContentLength, tc.size)
				}
			}
			got := serve(t, handlers[tc.path](), r)
			if tc.wantCode == http.StatusOK {
				if got.code != http.StatusOK {
					t.Errorf("status code = %d, want 200; body: %.300s", got.code, got.body)
				}
				return
			}
			checkJSONResponse(t, got, http.StatusRequestEntityTooLarge, statusJSON(413, metav1.StatusReasonRequestEntityTooLarge,
				fmt.Sprintf("request body is larger than the limit of %d bytes", limits[tc.path])))
		})
	}
}

// A body larger than the limit must be rejected before it is read to the end.
func TestReviewEndpointsStopReadingAtTheLimit(t *testing.T) {
	for _, ep := range reviewEndpoints() {
		t.Run(ep.path+" reads at most its limit and a little more", func(t *testing.T) {
			src := &countingReader{r: endless{}}
			r := post(t, ep.path, "application/json", src)
			r.ContentLength = -1
			got := serve(t, ep.handler(t), r)
			if got.code != http.StatusRequestEntityTooLarge {
				t.Errorf("status code = %d, want 413", got.code)
			}
			if max := int64(ep.limit) + 64<<10; src.n > max {
				t.Errorf("read %d bytes of an endless body, want at most %d", src.n, max)
			}
		})
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestAuthorizeRejectsInvalidSpecs(t *testing.T) {
	tests := []struct {
		name        string
		body        string
		wantMessage string
	}{
		{
			name:        "a v1 review with neither resourceAttributes nor nonResourceAttributes is a bad request",
			body:        `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice"}}`,
			wantMessage: "SubjectAccessReview spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
		},
		{
			name:        "a v1beta1 review with neither resourceAttributes nor nonResourceAttributes is a bad request",
			body:        `{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":{"user":"alice"}}`,
			wantMessage: "SubjectAccessReview spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
		},
		{
			name:        "a review without a spec is a bad request",
			body:        `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview"}`,
			wantMessage: "SubjectAccessReview spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
		},
		{
			name:        "a v1 review with both resourceAttributes and nonResourceAttributes is a bad request",
			body:        `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"get","resource":"pods"},"nonResourceAttributes":{"path":"/api","verb":"get"},"user":"alice"}}`,
			wantMessage: "SubjectAccessReview spec.nonResourceAttributes: Invalid value: cannot be specified in combination with resourceAttributes",
		},
		{
			name:        "a v1beta1 review with both resourceAttributes and nonResourceAttributes is a bad request",
			body:        `{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{},"nonResourceAttributes":{},"user":"alice"}}`,
			wantMessage: "SubjectAccessReview spec.nonResourceAttributes: Invalid value: cannot be specified in combination with resourceAttributes",
		},
		{
			name:        "a v1 review with neither user nor groups is a bad request",
			body:        `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"get","resource":"pods"}}}`,
			wantMessage: `SubjectAccessReview spec.user: Invalid value: "": at least one of user or group must be specified`,
		},
		{
			name:        "a v1 review with empty user and empty groups is a bad request",
			body:        `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"get","resource":"pods"},"user":"","groups":[]}}`,
			wantMessage: `SubjectAccessReview spec.user: Invalid value: "": at least one of user or group must be specified`,
		},
		{
			name:        "a v1 review that spells groups the v1beta1 way has no groups",
			body:        `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/api","verb":"get"},"group":["system:masters"]}}`,
			wantMessage: `SubjectAccessReview spec.user: Invalid value: "": at least one of user or group must be specified`,
		},
		{
			name:        "a v1beta1 review that spells groups the v1 way has no groups",
			body:        `{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/api","verb":"get"},"groups":["system:masters"]}}`,
			wantMessage: `SubjectAccessReview spec.user: Invalid value: "": at least one of user or group must be specified`,
		},
		{
			name:        "a review whose groups are not strings is a bad request",
			body:        `{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/api","verb":"get"},"groups":[1]}}`,
			wantMessage: "failed to decode SubjectAccessReview: json: cannot unmarshal number into Go struct field subjectAccessReviewSpec.spec.groups of type string",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &AuthorizeHandler{Authorizer: unreachableAuthorizer(t), Metrics: NewMetrics(), Log: discardLog()}
			got := serve(t, h, postJSON(t, "/authorize", tc.body))
			checkJSONResponse(t, got, 400, statusJSON(400, metav1.StatusReasonBadRequest, tc.wantMessage))
		})
	}
}

func TestAuthorizeAnswersInTheRequestVersion(t *testing.T) {
	v1Spec := `{
		"resourceAttributes": {"namespace": "team-a", "verb": "get", "group": "apps", "resource": "deployments", "subresource": "scale", "name": "web"},
		"user": "alice", "groups": ["dev", "system:authenticated"], "uid": "u-1",
		"extra": {"scopes.example.com": ["read", "write"]}
	}`
	v1Attrs := &authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: "alice", UID: "u-1", Groups: []string{"dev", "system:authenticated"},
			Extra: map[string][]string{"scopes.example.com": {"read", "write"}}},
		Verb: "get", Namespace: "team-a", APIGroup: "apps", APIVersion: "*", Resource: "deployments",
		Subresource: "scale", Name: "web", ResourceRequest: true,
	}
	v1beta1Spec := `{
		"nonResourceAttributes": {"path": "/api", "verb": "get"},
		"user": "bob", "group": ["ops", "system:authenticated"],
		"extra": {"scopes.example.com": ["read"]}
	}`
	v1beta1Attrs := &authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: "bob", Groups: []string{"ops", "system:authenticated"},
			Extra: map[string][]string{"scopes.example.com": {"read"}}},
		Verb: "get", Path: "/api",
	}
	tests := []struct {
		name      string
		body      string
		decision  authorizer.Decision
		reason    string
		err       error
		wantAttrs *authorizer.AttributesRecord
		want      string
		wantLabel string
	}{
		{
			name: "a v1 review the authorizer allows is answered allowed in v1",
			body: sarV1Body, decision: authorizer.DecisionAllow, reason: `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to User "alice"`,
			wantAttrs: v1Attrs, wantLabel: "allow",
			want: `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","metadata":{},"spec":` + v1Spec +
				`,"status":{"allowed":true,"reason":"RBAC: allowed by ClusterRoleBinding \"b\" of ClusterRole \"r\" to User \"alice\""}}`,
		},
		{
			name: "a v1 review the authorizer denies is answered denied",
			body: sarV1Body, decision: authorizer.DecisionDeny, reason: "no way",
			wantAttrs: v1Attrs, wantLabel: "deny",
			want: `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","metadata":{},"spec":` + v1Spec +
				`,"status":{"allowed":false,"denied":true,"reason":"no way"}}`,
		},
		{
			name: "a v1 review the authorizer has no opinion on is neither allowed nor denied",
			body: sarV1Body, decision: authorizer.DecisionNoOpinion,
			wantAttrs: v1Attrs, wantLabel: "no_opinion",
			want: `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","metadata":{},"spec":` + v1Spec +
				`,"status":{"allowed":false}}`,
		},
		{
			name: "an authorizer error is reported as evaluationError without allowing",
			body: sarV1Body, decision: authorizer.DecisionNoOpinion, err: errors.New("policy is not loaded yet"),
			wantAttrs: v1Attrs, wantLabel: "no_opinion",
			want: `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","metadata":{},"spec":` + v1Spec +
				`,"status":{"allowed":false,"evaluationError":"policy is not loaded yet"}}`,
		},
		{
			name:     "a status sent in the request never reaches the answer",
			body:     strings.Replace(sarV1Body, `"status": {"allowed": false}`, `"status": {"allowed": true, "reason": "trust me"}`, 1),
			decision: authorizer.DecisionNoOpinion, wantAttrs: v1Attrs, wantLabel: "no_opinion",
			want: `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","metadata":{},"spec":` + v1Spec +
				`,"status":{"allowed":false}}`,
		},
		{
			name: "a v1beta1 review reaches the authorizer with its groups and is answered in v1beta1 spelling group",
			body: sarV1beta1Body, decision: authorizer.DecisionAllow, reason: "ok",
			wantAttrs: v1beta1Attrs, wantLabel: "allow",
			want: `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1beta1","metadata":{},"spec":` + v1beta1Spec +
				`,"status":{"allowed":true,"reason":"ok"}}`,
		},
		{
			name: "a v1beta1 review the authorizer denies is answered denied in v1beta1",
			body: sarV1beta1Body, decision: authorizer.DecisionDeny, reason: "no", err: errors.New("partial failure"),
			wantAttrs: v1beta1Attrs, wantLabel: "deny",
			want: `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1beta1","metadata":{},"spec":` + v1beta1Spec +
				`,"status":{"allowed":false,"denied":true,"reason":"no","evaluationError":"partial failure"}}`,
		},
		{
			name:      "a v1beta1 review with groups only is answered",
			body:      `{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"list","resource":"pods","version":"v1"},"group":["system:nodes"]}}`,
			decision:  authorizer.DecisionAllow,
			wantAttrs: &authorizer.AttributesRecord{User: &user.DefaultInfo{Groups: []string{"system:nodes"}}, Verb: "list", APIVersion: "v1", Resource: "pods", ResourceRequest: true},
			wantLabel: "allow",
			want:      `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1beta1","metadata":{},"spec":{"resourceAttributes":{"verb":"list","resource":"pods","version":"v1"},"group":["system:nodes"]},"status":{"allowed":true}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []*authorizer.AttributesRecord
			authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				rec, ok := a.(*authorizer.AttributesRecord)
				if !ok {
					t.Fatalf("authorizer got %T, want *authorizer.AttributesRecord", a)
				}
				got = append(got, rec)
				return tc.decision, tc.reason, tc.err
			})
			m := NewMetrics()
			h := &AuthorizeHandler{Authorizer: authz, Metrics: m, Log: discardLog()}
			resp := serve(t, h, postJSON(t, "/authorize", tc.body))
			checkJSONResponse(t, resp, 200, tc.want)
			if diff := cmp.Diff([]*authorizer.AttributesRecord{tc.wantAttrs}, got); diff != "" {
				t.Errorf("attributes the authorizer got (-want +got):\n%s", diff)
			}
			// An authorizer that is not a Decider: who decided is
			// unknown, but a no opinion is nobody's.
			by := ""
			if tc.wantLabel == "no_opinion" {
				by = "none"
			}
			labels := map[string]string{"endpoint": "authorize", "decision": tc.wantLabel, "authorizer": by, "impersonation": "none"}
			if n := counterValue(t, m, "deputy_decisions_total", labels); n != 1 {
				t.Errorf("deputy_decisions_total%v = %v, want 1", labels, n)
			}
		})
	}
}

func TestAuthenticateRejectsAnEmptyToken(t *testing.T) {
	for _, body := range []string{
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":""}}`,
		`{"apiVersion":"authentication.k8s.io/v1beta1","kind":"TokenReview","spec":{}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview"}`,
	} {
		t.Run("a review without a token is a bad request with kube-apiserver's message: "+body, func(t *testing.T) {
			h := &AuthenticateHandler{Reviewer: tokenreview.NewReviewer(nil, nil), Metrics: NewMetrics(), Log: discardLog()}
			got := serve(t, h, postJSON(t, "/authenticate", body))
			checkJSONResponse(t, got, 400, statusJSON(400, metav1.StatusReasonBadRequest, "token is required for TokenReview in authentication"))
		})
	}
}

func TestAuthenticateAnswersInTheRequestVersion(t *testing.T) {
	alice := authenticationv1.TokenReviewStatus{
		Authenticated: true,
		User: authenticationv1.UserInfo{Username: "alice", UID: "u-1", Groups: []string{"dev", "system:authenticated"},
			Extra: map[string]authenticationv1.ExtraValue{"scopes.example.com": {"read"}}},
		Audiences: []string{"https://kubernetes.default.svc"},
	}
	aliceJSON := `{"authenticated":true,"user":{"username":"alice","uid":"u-1","groups":["dev","system:authenticated"],"extra":{"scopes.example.com":["read"]}},"audiences":["https://kubernetes.default.svc"]}`
	tests := []struct {
		name      string
		body      string
		status    authenticationv1.TokenReviewStatus
		err       error
		wantSpec  authenticationv1.TokenReviewSpec
		want      string
		wantLabel string
	}{
		{
			name: "an authenticated v1 review is answered in v1 without the token",
			body: trV1Body, status: alice,
			wantSpec:  authenticationv1.TokenReviewSpec{Token: secretToken, Audiences: []string{"https://kubernetes.default.svc"}},
			want:      `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","metadata":{},"spec":{},"status":` + aliceJSON + `}`,
			wantLabel: "authenticated",
		},
		{
			name: "an authenticated v1beta1 review is answered in v1beta1 without the token",
			body: trV1beta1Body, status: alice,
			wantSpec:  authenticationv1.TokenReviewSpec{Token: secretToken},
			want:      `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1beta1","metadata":{},"spec":{},"status":` + aliceJSON + `}`,
			wantLabel: "authenticated",
		},
		{
			name:      "an unknown token is answered unauthenticated without an error",
			body:      trV1Body,
			wantSpec:  authenticationv1.TokenReviewSpec{Token: secretToken, Audiences: []string{"https://kubernetes.default.svc"}},
			want:      `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","metadata":{},"spec":{},"status":{"user":{}}}`,
			wantLabel: "unauthenticated",
		},
		{
			name: "a reviewer fault is answered as status.error so kube-apiserver does not cache it",
			body: trV1beta1Body, err: tokenreview.ErrInvalidAudiences,
			wantSpec:  authenticationv1.TokenReviewSpec{Token: secretToken},
			want:      `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1beta1","metadata":{},"spec":{},"status":{"user":{},"error":"error validating audiences"}}`,
			wantLabel: "error",
		},
		{
			name:      "the review's name and uid are echoed",
			body:      `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","metadata":{"name":"r","uid":"42"},"spec":{"token":"` + secretToken + `"}}`,
			status:    alice,
			wantSpec:  authenticationv1.TokenReviewSpec{Token: secretToken},
			want:      `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","metadata":{"name":"r","uid":"42"},"spec":{},"status":` + aliceJSON + `}`,
			wantLabel: "authenticated",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var specs []authenticationv1.TokenReviewSpec
			rev := fakeReviewer(func(_ context.Context, spec authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
				specs = append(specs, spec)
				return tc.status, tc.err
			})
			m := NewMetrics()
			h := &AuthenticateHandler{Reviewer: rev, Metrics: m, Log: discardLog()}
			got := serve(t, h, postJSON(t, "/authenticate", tc.body))
			checkJSONResponse(t, got, 200, tc.want)
			if bytes.Contains(got.body, []byte(secretToken)) {
				t.Errorf("the response echoes the token: %s", got.body)
			}
			if diff := cmp.Diff([]authenticationv1.TokenReviewSpec{tc.wantSpec}, specs); diff != "" {
				t.Errorf("specs the reviewer got (-want +got):\n%s", diff)
			}
			if n := counterValue(t, m, "deputy_decisions_total", map[string]string{"endpoint": "authenticate", "decision": tc.wantLabel, "authorizer": "", "impersonation": ""}); n != 1 {
				t.Errorf("deputy_decisions_total{decision=%q} = %v, want 1", tc.wantLabel, n)
			}
		})
	}
}

// The token must not leak into logs either, even at debug level.
func TestAuthenticateNeverLogsTheToken(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, rev := range []TokenReviewer{
		fakeReviewer(nil),
		fakeReviewer(func(context.Context, authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
			return authenticationv1.TokenReviewStatus{Error: "backend unavailable"}, nil
		}),
		fakeReviewer(func(context.Context, authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
			return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}, nil
		}),
	} {
		h := &AuthenticateHandler{Reviewer: rev, Metrics: NewMetrics(), Log: log}
		for _, body := range []string{trV1Body, trV1beta1Body, strings.Replace(trV1Body, `"spec"`, `"spec":1,"x"`, 1)} {
			serve(t, h, postJSON(t, "/authenticate", body))
		}
	}
	if bytes.Contains(logs.Bytes(), []byte(secretToken)) {
		t.Errorf("the log contains the token:\n%s", logs.Bytes())
	}
}

func TestValidateRejectsIncompleteReviews(t *testing.T) {
	tests := []struct {
		name        string
		body        string
		wantMessage string
	}{
		{
			name:        "a v1 review without a request is a bad request",
			body:        `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
			wantMessage: "AdmissionReview request is required",
		},
		{
			name:        "a v1beta1 review with a null request is a bad request",
			body:        `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":null}`,
			wantMessage: "AdmissionReview request is required",
		},
		{
			name:        "a review that carries only a response is a bad request",
			body:        `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"x","allowed":true}}`,
			wantMessage: "AdmissionReview request is required",
		},
		{
			name:        "a review without a request uid is a bad request",
			body:        `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}`,
			wantMessage: "AdmissionReview request.uid is required: the response must echo it",
		},
		{
			name:        "a review with an empty request uid is a bad request",
			body:        `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":""}}`,
			wantMessage: "AdmissionReview request.uid is required: the response must echo it",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := quietValidateHandler(unreachableAdmission(t), NewMetrics())
			got := serve(t, h, postJSON(t, "/validate", tc.body))
			checkJSONResponse(t, got, 400, statusJSON(400, metav1.StatusReasonBadRequest, tc.wantMessage))
		})
	}
}

func TestValidateAnswersInTheRequestVersion(t *testing.T) {
	patch := []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/metadata/labels", Value: map[string]string{"x": "y"}}}
	tests := []struct {
		name      string
		body      string
		handler   admission.HandlerFunc
		wantUID   string
		want      string
		wantLabel string
	}{
		{
			name: "an allowed v1 review is answered in v1 with the uid and without the handler's patch",
			body: arV1Body,
			handler: func(_ context.Context, req admission.Request) admission.Response {
				return admission.Patched("labelled", patch...)
			},
			wantUID: "705ab4f5-6393-11e8-b7cc-42010a800002", wantLabel: "allowed",
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true,"status":{"metadata":{},"message":"labelled","code":200}}}`,
		},
		{
			name: "an allowed v1beta1 review is answered in v1beta1 with the uid and without the handler's patch",
			body: arV1beta1Body,
			handler: func(_ context.Context, req admission.Request) admission.Response {
				resp := admission.Allowed("")
				resp.Patch = []byte(`[{"op":"remove","path":"/spec"}]`)
				pt := admissionv1.PatchTypeJSONPatch
				resp.PatchType = &pt
				return resp
			},
			wantUID: "705ab4f5-6393-11e8-b7cc-42010a800003", wantLabel: "allowed",
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800003","allowed":true,"status":{"metadata":{},"code":200}}}`,
		},
		{
			name: "a denied v1 review carries the reason, warnings and the request's uid, not the handler's",
			body: arV1Body,
			handler: func(_ context.Context, req admission.Request) admission.Response {
				resp := admission.Denied("configmaps named settings are reserved").WithWarnings("think again")
				resp.UID = "not-the-request-uid"
				return resp
			},
			wantUID: "705ab4f5-6393-11e8-b7cc-42010a800002", wantLabel: "denied",
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":false,"status":{"metadata":{},"message":"configmaps named settings are reserved","reason":"Forbidden","code":403},"warnings":["think again"]}}`,
		},
		{
			name: "a denied v1beta1 review keeps audit annotations",
			body: arV1beta1Body,
			handler: func(_ context.Context, req admission.Request) admission.Response {
				resp := admission.Denied("no")
				resp.AuditAnnotations = map[string]string{"deputy.dev/why": "reserved"}
				return resp
			},
			wantUID: "705ab4f5-6393-11e8-b7cc-42010a800003", wantLabel: "denied",
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800003","allowed":false,"status":{"metadata":{},"message":"no","reason":"Forbidden","code":403},"auditAnnotations":{"deputy.dev/why":"reserved"}}}`,
		},
		{
			name: "a response sent in the request never reaches the answer",
			body: strings.Replace(arV1Body, `"request"`, `"response":{"uid":"x","allowed":true,"patch":"W10="},"request"`, 1),
			handler: func(context.Context, admission.Request) admission.Response {
				return admission.Denied("")
			},
			wantUID: "705ab4f5-6393-11e8-b7cc-42010a800002", wantLabel: "denied",
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":false,"status":{"metadata":{},"reason":"Forbidden","code":403}}}`,
		},
		{
			name: "a handler that panics is answered as a denial with code 500 in the request's version",
			body: arV1beta1Body,
			handler: func(context.Context, admission.Request) admission.Response {
				panic("boom")
			},
			wantUID: "705ab4f5-6393-11e8-b7cc-42010a800003", wantLabel: "denied",
			want: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800003","allowed":false,"status":{"metadata":{},"message":"panic: boom [recovered]","code":500}}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var reqs []admission.Request
			m := NewMetrics()
			h := quietValidateHandler(admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
				reqs = append(reqs, req)
				return tc.handler(ctx, req)
			}), m)
			got := serve(t, h, postJSON(t, "/validate", tc.body))
			checkJSONResponse(t, got, 200, tc.want)
			if len(reqs) != 1 {
				t.Fatalf("the handler was called %d times, want once", len(reqs))
			}
			if string(reqs[0].UID) != tc.wantUID {
				t.Errorf("the handler got uid %q, want %q", reqs[0].UID, tc.wantUID)
			}
			if n := counterValue(t, m, "deputy_decisions_total", map[string]string{"endpoint": "validate", "decision": tc.wantLabel, "authorizer": "", "impersonation": ""}); n != 1 {
				t.Errorf("deputy_decisions_total{decision=%q} = %v, want 1", tc.wantLabel, n)
			}
		})
	}
}

func TestValidatePassesTheObjectsThrough(t *testing.T) {
	var got admission.Request
	h := quietValidateHandler(admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
		got = req
		return admission.Allowed("")
	}), NewMetrics())
	serve(t, h, postJSON(t, "/validate", arV1beta1Body))
	if got.Operation != admissionv1.Delete || got.Name != "settings" || got.Namespace != "team-a" || got.UserInfo.Username != "alice" {
		t.Errorf("the handler got %+v", got.AdmissionRequest)
	}
	if diff := diffJSON(t, got.OldObject.Raw, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings","namespace":"team-a"}}`); diff != "" {
		t.Errorf("oldObject mismatch (-want +got):\n%s", diff)
	}
	if got.Object.Raw != nil {
		t.Errorf("object = %s, want none", got.Object.Raw)
	}
}

// brokenWriter fails every Write, like a connection the client closed.
type brokenWriter struct {
	header http.Header
	codes  []int
	writes int
}

func (w *brokenWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *brokenWriter) WriteHeader(code int) { w.codes = append(w.codes, code) }

func (w *brokenWriter) Write([]byte) (int, error) {
	w.writes++
	return 0, errors.New("write tcp 127.0.0.1:8443->127.0.0.1:51234: write: broken pipe")
}

func TestAFailingResponseWriterPanicsNothing(t *testing.T) {
	allowAll := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	authn := fakeReviewer(func(context.Context, authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
		return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}, nil
	})
	adm := admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { return admission.Allowed("") })
	m := NewMetrics()
	direct := map[string]http.Handler{
		"/authorize":    &AuthorizeHandler{Authorizer: allowAll, Metrics: m, Log: discardLog()},
		"/authenticate": &AuthenticateHandler{Reviewer: authn, Metrics: m, Log: discardLog()},
		"/validate":     quietValidateHandler(adm, m),
	}
	routed := NewServer(ServerOptions{
		Authorize: direct["/authorize"], Authenticate: direct["/authenticate"], Validate: direct["/validate"],
		Readiness: []ReadinessCheck{{Name: "policy", Check: func() error { return errors.New("not loaded") }}},
		Metrics:   m, Log: discardLog(),
	}).Handler()
	bodies := map[string]string{"/authorize": sarV1Body, "/authenticate": trV1Body, "/validate": arV1Body}
	type call struct {
		name, method, path, contentType, body string
		wantCode                              int
	}
	var calls []call
	for path, body := range bodies {
		calls = append(calls,
			call{"an answered review", http.MethodPost, path, "application/json", body, 200},
			call{"an empty body", http.MethodPost, path, "application/json", "", 400},
			call{"a wrong content type", http.MethodPost, path, "text/plain", body, 415},
			call{"a GET", http.MethodGet, path, "", "", 405},
		)
	}
	for _, c := range calls {
		for name, h := range map[string]http.Handler{"handler": direct[c.path], "router": routed} {
			t.Run("the "+name+" survives a broken writer on "+c.path+" with "+c.name, func(t *testing.T) {
				w := &brokenWriter{}
				func() {
					defer func() {
						if v := recover(); v != nil {
							t.Fatalf("ServeHTTP panicked: %v", v)
						}
					}()
					r := httptest.NewRequestWithContext(t.Context(), c.method, c.path, strings.NewReader(c.body))
					if c.contentType != "" {
						r.Header.Set("Content-Type", c.contentType)
					}
					h.ServeHTTP(w, r)
				}()
				if diff := cmp.Diff([]int{c.wantCode}, w.codes); diff != "" {
					t.Errorf("status codes written (-want +got):\n%s", diff)
				}
				if w.writes != 1 {
					t.Errorf("the body was written %d times, want once (no retries, no error page after a failed write)", w.writes)
				}
			})
		}
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/readyz?verbose", "/metrics"} {
		t.Run("the router survives a broken writer on "+path, func(t *testing.T) {
			defer func() {
				if v := recover(); v != nil {
					t.Fatalf("ServeHTTP panicked: %v", v)
				}
			}()
			routed.ServeHTTP(&brokenWriter{}, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
		})
	}
}

func TestAPanickingHandlerIsAnInternalErrorAndTheServerKeepsServing(t *testing.T) {
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "panic" {
			var m map[string]int
			m["boom"]++ // a nil map write: a real bug in an authorizer
		}
		return authorizer.DecisionAllow, "ok", nil
	})
	m := NewMetrics()
	var logs bytes.Buffer
	srv := httptest.NewServer(NewServer(ServerOptions{
		Authorize: &AuthorizeHandler{Authorizer: authz, Metrics: m, Log: discardLog()},
		Metrics:   m,
		Log:       slog.New(slog.NewTextHandler(&logs, nil)),
	}).Handler())
	defer srv.Close()

	panicking := strings.Replace(sarV1Body, `"user": "alice"`, `"user": "panic"`, 1)
	var ids []string
	for i := range 3 {
		t.Run(fmt.Sprintf("a panic in request %d is a 500 with a metav1.Status", i+1), func(t *testing.T) {
			resp := do(t, srv.Client(), http.MethodPost, srv.URL+"/authorize", panicking)
			id := resp.header.Get("X-Request-Id")
			if id == "" {
				t.Fatal("the response has no X-Request-Id")
			}
			ids = append(ids, id)
			checkJSONResponse(t, resp, 500, statusJSON(500, metav1.StatusReasonInternalError, "internal error; see deputy's log for request "+id))
		})
		t.Run(fmt.Sprintf("a good request after panic %d is answered", i+1), func(t *testing.T) {
			resp := do(t, srv.Client(), http.MethodPost, srv.URL+"/authorize", sarV1Body)
			if resp.code != 200 || !bytes.Contains(resp.body, []byte(`"allowed":true`)) {
				t.Errorf("got %d %s, want 200 allowed", resp.code, resp.body)
			}
		})
	}
	for _, id := range ids {
		if !strings.Contains(logs.String(), `msg="panic while serving request" requestID=`+id+` path=/authorize panic="assignment to entry in nil map"`) {
			t.Errorf("the panic of request %s is not logged with its ID and value:\n%s", id, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "TestAPanickingHandlerIsAnInternalErrorAndTheServerKeepsServing") {
		t.Errorf("the logged stack does not show where the panic happened:\n%s", logs.String())
	}
	if n := counterValue(t, m, "deputy_http_requests_total", map[string]string{"endpoint": "authorize", "code": "500"}); n != 3 {
		t.Errorf(`deputy_http_requests_total{code="500"} = %v, want 3 (a panic is answered 500 and must be counted as such)`, n)
	}
	if n := counterValue(t, m, "deputy_http_requests_total", map[string]string{"endpoint": "authorize", "code": "200"}); n != 3 {
		t.Errorf(`deputy_http_requests_total{code="200"} = %v, want 3`, n)
	}
}

// do sends one request with a JSON body and reads the whole answer.
func do(t *testing.T, c *http.Client, method, url, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("failed to read the response of %s %s: %v", method, url, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: b}
}

// Over a real connection the client must read the 413, not a reset, whether
// the body has a length or is chunked, and the server keeps serving.
func TestOversizedBodiesOverTheNetwork(t *testing.T) {
	const MiB = 1 << 20
	allowAll := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	m := NewMetrics()
	srv := httptest.NewServer(NewServer(ServerOptions{
		Authorize:    &AuthorizeHandler{Authorizer: allowAll, Metrics: m, Log: discardLog()},
		Authenticate: &AuthenticateHandler{Reviewer: fakeReviewer(nil), Metrics: m, Log: discardLog()},
		Validate:     quietValidateHandler(unreachableAdmission(t), m),
		Metrics:      m, Log: discardLog(),
	}).Handler())
	defer srv.Close()
	tests := []struct {
		name     string
		path     string
		template string
		size     int
		limit    int
	}{
		{"a 2 MiB SubjectAccessReview", "/authorize", sarPadTemplate, 2 * MiB, maxSubjectAccessReviewBytes},
		{"a TokenReview of 1 MiB and one byte", "/authenticate", trPadTemplate, MiB + 1, maxTokenReviewBytes},
		{"an 8 MiB AdmissionReview", "/validate", arPadTemplate, 8 * MiB, maxAdmissionReviewBytes},
	}
	for _, tc := range tests {
		for _, chunked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s (chunked %v) is answered 413", tc.name, chunked), func(t *testing.T) {
				body := paddedBody(t, tc.template, tc.size)
				var rd io.Reader = bytes.NewReader(body)
				if chunked {
					rd = unknownLength{rd}
				}
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+tc.path, rd)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatalf("POST %s: %v", tc.path, err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				checkJSONResponse(t, response{code: resp.StatusCode, header: resp.Header, body: b}, 413,
					statusJSON(413, metav1.StatusReasonRequestEntityTooLarge, fmt.Sprintf("request body is larger than the limit of %d bytes", tc.limit)))
			})
		}
	}
	t.Run("the server answers a good review afterwards", func(t *testing.T) {
		if got := do(t, srv.Client(), http.MethodPost, srv.URL+"/authorize", sarV1Body); got.code != 200 {
			t.Errorf("status code = %d, want 200; body: %s", got.code, got.body)
		}
	})
	if n := counterValue(t, m, "deputy_http_requests_total", map[string]string{"endpoint": "authorize", "code": "413"}); n != 2 {
		t.Errorf(`deputy_http_requests_total{code="413",endpoint="authorize"} = %v, want 2`, n)
	}
}

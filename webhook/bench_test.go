package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// discardWriter is the cheapest ResponseWriter that still checks the status.
type discardWriter struct {
	header http.Header
	code   int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkAuthorizeHandler is the HTTP layer's cost per SubjectAccessReview:
// read and limit the body, decode, validate, call an allow-all authorizer,
// encode the answer. "router" adds deputy's handler chain (chi, request ID,
// panic recovery, metrics) without client certificates.
func BenchmarkAuthorizeHandler(b *testing.B) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(sarV1Body)); err != nil {
		b.Fatal(err)
	}
	body := compact.Bytes()
	allowAll := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	m := NewMetrics()
	handler := &AuthorizeHandler{Authorizer: allowAll, Metrics: m, Log: discardLog()}
	router := NewServer(ServerOptions{Authorize: handler, Metrics: m, Log: discardLog()}).Handler()

	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"handler", handler}, {"router", router}} {
		b.Run(bc.name, func(b *testing.B) {
			rd := bytes.NewReader(body)
			r := httptest.NewRequestWithContext(b.Context(), http.MethodPost, "/authorize", rd)
			r.Header.Set("Content-Type", "application/json")
			w := &discardWriter{header: http.Header{}}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(body)
				r.Body = io.NopCloser(rd)
				clear(w.header)
				w.code = 0
				bc.h.ServeHTTP(w, r)
				if w.code != http.StatusOK {
					b.Fatalf("status code = %d, want 200", w.code)
				}
			}
		})
	}
}

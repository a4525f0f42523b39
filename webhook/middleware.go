package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type requestIDKey struct{}

// requestIDs are "<random prefix per process>-<counter>": unique, cheap, and
// they never echo anything the client sent.
var (
	requestIDPrefix = func() string {
		var b [4]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	requestCounter atomic.Uint64
)

// withRequestID gives every request an ID, returned in X-Request-Id and used in logs.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := requestIDPrefix + "-" + strconv.FormatUint(requestCounter.Add(1), 10)
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// recoverPanics turns a panic in a handler into a 500 with a generic message
// (a panic is deputy's bug, never the client's), logs the stack, and keeps
// serving. http.ErrAbortHandler is re-raised as net/http expects.
func recoverPanics(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					log.Error("panic while serving request", "requestID", requestID(r.Context()), "path", r.URL.Path,
						"panic", v, "stack", string(debug.Stack()))
					writeStatus(w, newStatusError(http.StatusInternalServerError, metav1.StatusReasonInternalError,
						"internal error; see deputy's log for request "+requestID(r.Context())))
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

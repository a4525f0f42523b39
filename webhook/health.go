package webhook

import (
	"fmt"
	"net/http"
	"strings"
)

// ReadinessCheck is one named readiness condition; Check returns nil when ready
// or an error whose text says why not and what to do.
type ReadinessCheck struct {
	Name  string
	Check func() error
}

// healthz answers liveness: the process serves HTTP. It does not depend on
// policy, so a broken policy file never gets deputy restarted (the last good
// policy keeps serving).
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 200 "ok" when every check passes, else 503 listing each check
// as "[+]name ok" or "[-]name failed: reason". kube-apiserver's healthz package
// withholds failure reasons; deputy prints them because operators need the
// file and document of a broken policy, and the checks expose nothing secret.
func readyz(checks []ReadinessCheck) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		failed := false
		for _, c := range checks {
			if err := c.Check(); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %s\n", c.Name, strings.ReplaceAll(err.Error(), "\n", "\n    "))
			} else {
				fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(b.String() + "readyz check failed\n"))
			return
		}
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			_, _ = w.Write([]byte(b.String() + "readyz check passed\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}

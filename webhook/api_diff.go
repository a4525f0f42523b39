package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
)

// diffRetryAfterSeconds is the Retry-After of the 429 answered while as many
// diffs run as the bound allows (apps.ErrTooManyDiffs).
const diffRetryAfterSeconds = 5

// diffQueryParameters are the query parameters of a diff.
var diffQueryParameters = []string{"revision", "revisions"}

// diff answers GET .../applications/{name}/diff: what a sync of the
// Application would change (200 + v1alpha1.ApplicationDiff), computed in
// this request. Authorized as verb get on applications/diff. Errors: 400
// for a bad query, 404, 422 when the Application is the problem (invalid
// revisions, unusable project, a source that does not render, a
// ServiceAccount that cannot be derived), 429 with Retry-After when too
// many diffs run, 503 when the destination or the engine is unavailable or
// deputy shuts down, 504 when the diff outlives sync.limits.operationTimeout.
func (h *APIHandler) diff(w http.ResponseWriter, r *http.Request) {
	op, serr := readDiffQuery(r.URL.Query())
	if serr != nil {
		writeStatus(w, serr)
		return
	}
	h.runDiff(w, r, "get", op, nil)
}

// runDiff is a diff (GET, verb get) or a local diff (POST, verb create:
// objects are diffed instead of the render) once the request is read.
func (h *APIHandler) runDiff(w http.ResponseWriter, r *http.Request, verb string, op v1alpha1.SyncOperation, objects []*unstructured.Unstructured) {
	ns, name := chi.URLParam(r, "namespace"), chi.URLParam(r, "name")
	app, ok := h.lookup(w, r, verb, "diff", ns, name)
	if !ok {
		return
	}
	project, ok := h.project(w, app, op)
	if !ok {
		return
	}
	ctx, cancel := h.untilStopped(r.Context())
	defer cancel()
	// A diff renders and dry-runs every object: it may take up to
	// sync.limits.operationTimeout, longer than the server's WriteTimeout
	// (30s for the whole response). As a watch does, no deadline while it
	// runs, then one for the write.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // errors: a writer without deadlines (tests); the server's timeouts apply
	var d *v1alpha1.ApplicationDiff
	err := errShuttingDown
	if ctx.Err() == nil {
		d, err = h.opts.Applications.Diff(ctx, app, project, op, objects)
	}
	_ = rc.SetWriteDeadline(time.Now().Add(apiStreamWriteTimeout))
	log := h.requestLog(r).With("application", ns+"/"+name)
	if err == nil && d == nil {
		err = errors.New("the sync engine returned no diff")
	}
	if err != nil {
		st := diffStatus(ctx, name, err)
		if st.code() == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(diffRetryAfterSeconds))
		}
		log.Info("diff failed", "code", st.code(), "error", err.Error())
		writeStatus(w, st)
		return
	}
	out := *d
	out.APIVersion, out.Kind = v1alpha1.SchemeGroupVersion.String(), v1alpha1.KindApplicationDiff
	if out.Namespace == "" && out.Name == "" {
		out.Namespace, out.Name = ns, name
	}
	if out.Resources == nil {
		out.Resources = []v1alpha1.ResourceDiff{}
	}
	log.Info("diff", "local", objects != nil, "revision", op.Revision, "revisions", op.Revisions, "changed", out.Changed(), "resources", len(out.Resources))
	writeJSON(w, http.StatusOK, &out)
}

// errShuttingDown is the diff of a request that arrives while deputy drains.
var errShuttingDown = errors.New("deputy is shutting down: retry against another replica or once it is back")

// readDiffQuery reads a diff's query strictly: revision (once, for
// spec.source) and revisions (once per source, for spec.sources); another
// parameter is 400, as are revisions checkRevisions refuses.
func readDiffQuery(q url.Values) (v1alpha1.SyncOperation, *statusError) {
	var op v1alpha1.SyncOperation
	for k := range q {
		if !slices.Contains(diffQueryParameters, k) {
			return op, badRequest("unknown query parameter %q: a diff takes revision=R (spec.source) or revisions=A&revisions=B, one per source in order (spec.sources)", k)
		}
	}
	if n := len(q["revision"]); n > 1 {
		return op, badRequest("revision is given %d times: give it once (for spec.sources give revisions, once per source in order)", n)
	}
	op.Revision, op.Revisions = q.Get("revision"), q["revisions"]
	return op, checkRevisions(op)
}

// diffStatus is the answer to a diff that failed with err (ctx is the
// diff's context): see APIHandler.diff. Everything not recognised as
// deputy's or the destination's unavailability is the Application's
// problem: 422 with the engine's message, which names what to fix.
func diffStatus(ctx context.Context, name string, err error) *statusError {
	switch {
	case errors.Is(err, apps.ErrTooManyDiffs):
		return fromAPIError(apierrors.NewTooManyRequests(err.Error(), diffRetryAfterSeconds))
	case errors.Is(err, apps.ErrInvalidSync), errors.Is(err, policy.ErrProjectNotUsable):
		return invalidApplication(name, err.Error())
	case errors.Is(err, apps.ErrDiffUnavailable), errors.Is(err, policy.ErrNotLoaded), errors.Is(err, errShuttingDown):
		return fromAPIError(apierrors.NewServiceUnavailable(err.Error()))
	case errors.Is(err, context.DeadlineExceeded):
		return fromAPIError(apierrors.NewTimeoutError("the diff did not finish within sync.limits.operationTimeout: "+err.Error(), 0))
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return fromAPIError(apierrors.NewServiceUnavailable("the diff was cancelled (the client went away, or deputy is shutting down): " + err.Error()))
	case destinationUnavailable(err):
		return fromAPIError(apierrors.NewServiceUnavailable(fmt.Sprintf("the destination is unavailable: %v", err)))
	}
	return invalidApplication(name, err.Error())
}

// destinationUnavailable reports whether err is a failure to reach a
// cluster (a network error) or a cluster's answer that it cannot serve now
// (503, 504, 429, 500), which a retry may cure.
func destinationUnavailable(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

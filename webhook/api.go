package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/go-chi/chi/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	kjson "sigs.k8s.io/json"

	"deputy.dev/deputy/apps"
	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/tokenreview"
)

// APIPrefix is the path prefix of deputy's own API (group deputy.dev, version
// v1alpha1), laid out as kube-apiserver lays out a group's resources.
const APIPrefix = v1alpha1.APIPath

// APIStreamContentType is the content type of a watch: newline-delimited JSON,
// one v1alpha1.OperationEvent per line (what package apiclient decodes).
const APIStreamContentType = v1alpha1.OperationStreamContentType

// maxSyncRequestBytes bounds the body of a sync request: it holds a few short
// fields (revision or revisions, prune, dryRun, healthTimeout), so 64 KiB is
// generous and anything larger is refused with 413 before it is read
// further.
const maxSyncRequestBytes = 64 << 10

// maxRevisionLength bounds a requested revision: Git ref names are far
// shorter in practice, commit SHAs are 40 (SHA-1) or 64 (SHA-256) characters.
const maxRevisionLength = 255

// apiStreamWriteTimeout bounds each write of a watch stream. The server's
// WriteTimeout (30s for the whole response) would cut a sync that runs
// longer, so a stream sets its own deadline per event and none while it waits
// for the next one.
const apiStreamWriteTimeout = 30 * time.Second

// applicationsResource is the GroupResource of Applications, as status messages
// name it (applications.deputy.dev).
var applicationsResource = schema.GroupResource{Group: v1alpha1.Group, Resource: "applications"}

// APIOptions configure the APIHandler. Every field is required except
// Metrics and Log.
type APIOptions struct {
	// Authenticator authenticates callers (NewAPIAuthenticator).
	Authenticator authenticator.Request
	// RequestHeader is the trusted front proxy, whose identity headers are
	// removed after authentication; nil when none is trusted.
	RequestHeader *APIRequestHeader
	// APIAudiences are put into the authentication context, as
	// kube-apiserver does with its --api-audiences: tokens are valid for
	// these audiences only.
	APIAudiences []string
	// Authorizer decides each request (NewAPIAuthorizer).
	Authorizer authorizer.Authorizer
	// AggregatedGroup is the API group the API also answers as, under
	// /apis/<group>/v1alpha1, for kube-apiserver's aggregation layer; ""
	// for none.
	AggregatedGroup string
	// Applications finds Applications and their AppProjects, starts syncs
	// and reports their state and progress: apps.File in file mode (the
	// policy snapshot, operations run in this process), apps.Controller in
	// cluster mode (the request recorded on the Application, its status).
	Applications apps.Applications
	// Ready, if set, answers 503 to authenticated requests while it returns
	// an error (no policy loaded yet).
	Ready func() error
	Log   *slog.Logger
}

// APIHandler serves deputy's own API, under APIPrefix and, for the
// aggregation layer, under /apis/<AggregatedGroup>/v1alpha1:
//
//	POST .../namespaces/{ns}/applications/{name}/sync   start a sync (202 + OperationState)
//	GET  .../namespaces/{ns}/applications/{name}        the Application with its status
//	GET  .../namespaces/{ns}/applications/{name}?watch=true   its operation's progress, NDJSON
//	GET  .../namespaces/{ns}/applications/{name}/diff[?revision=R | ?revisions=A&revisions=B]
//	                                                    what a sync would change (200 + ApplicationDiff)
//	POST .../namespaces/{ns}/applications/{name}/diff   the same for the manifests in the body
//	                                                    (v1alpha1.LocalDiffRequest: deputy diff --local)
//	GET  /apis/{group}/v1alpha1                         discovery (APIResourceList)
//
// Every request goes through kube-apiserver's handler chain (WithAPIChain):
// authentication (401 otherwise), audit, then authorization as verb create
// on applications/sync, verb get on applications/diff (create for POST: a
// local diff) or verb get on applications, in group deputy.dev (also for the aggregated group), the
// namespace and the name (403 otherwise, with kube-apiserver's message and
// the deciding reason). Errors are metav1.Status objects, as kube-apiserver
// writes them. Credentials are removed from the request once the caller is
// authenticated and never logged.
type APIHandler struct {
	opts     APIOptions
	log      *slog.Logger
	router   http.Handler
	stop     chan struct{}
	stopOnce sync.Once
}

// NewAPIHandler returns the handler; mount it at "/apis/*".
func NewAPIHandler(opts APIOptions) *APIHandler {
	h := &APIHandler{opts: opts, log: opts.Log, stop: make(chan struct{})}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, fromAPIError(apierrors.NewNotFound(schema.GroupResource{}, "")).withMessage("the server could not find the requested resource: deputy serves "+
			"POST "+APIPrefix+"/namespaces/NS/applications/NAME/sync, GET "+APIPrefix+"/namespaces/NS/applications/NAME and GET or POST "+APIPrefix+"/namespaces/NS/applications/NAME/diff"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, fromAPIError(apierrors.NewMethodNotSupported(applicationsResource, r.Method)))
	})
	groups := []string{v1alpha1.Group}
	if opts.AggregatedGroup != "" && opts.AggregatedGroup != v1alpha1.Group {
		groups = append(groups, opts.AggregatedGroup)
	}
	for _, g := range groups {
		prefix := "/apis/" + g + "/" + v1alpha1.Version
		r.Post(prefix+"/namespaces/{namespace}/applications/{name}/sync", h.sync)
		r.Get(prefix+"/namespaces/{namespace}/applications/{name}", h.get)
		r.Get(prefix+"/namespaces/{namespace}/applications/{name}/diff", h.diff)
		r.Post(prefix+"/namespaces/{namespace}/applications/{name}/diff", h.diffLocal)
		discovery := apiDiscovery(g)
		r.Get(prefix, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, discovery) })
	}
	h.router = WithAPIChain(r, APIChainOptions{
		Authenticator: opts.Authenticator, RequestHeader: opts.RequestHeader, APIAudiences: opts.APIAudiences,
		Authorizer: opts.Authorizer, AggregatedGroup: opts.AggregatedGroup, Ready: opts.Ready, Log: h.log,
	})
	return h
}

// ServeHTTP implements http.Handler.
func (h *APIHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.router.ServeHTTP(w, r) }

// CloseStreams ends every watch stream and cancels the diffs in progress
// (and refuses new ones), so that a graceful shutdown does not wait for
// syncs or diffs to finish. The server calls it when it starts draining.
func (h *APIHandler) CloseStreams() { h.stopOnce.Do(func() { close(h.stop) }) }

// apiUser is the authenticated caller (set by the handler chain).
func apiUser(ctx context.Context) user.Info {
	u, _ := request.UserFrom(ctx)
	return u
}

func (h *APIHandler) requestLog(r *http.Request) *slog.Logger {
	name := ""
	if u := apiUser(r.Context()); u != nil {
		name = u.GetName()
	}
	return h.log.With("requestID", requestID(r.Context()), "user", name)
}

// lookup finds the Application and answers 404 or 503 itself when it cannot;
// a project token's scope is checked again on the Application found (the
// authorizer checked it before, on what it could see then): 403.
func (h *APIHandler) lookup(w http.ResponseWriter, r *http.Request, verb, subresource, namespace, name string) (*v1alpha1.Application, bool) {
	app, err := h.opts.Applications.Application(namespace, name)
	if err == nil {
		if u := apiUser(r.Context()); u != nil {
			if _, restricted := tokenreview.ProjectOf(u); restricted {
				serr := checkProjectScope(h.opts.Applications, u, app)
				if errors.Is(serr, policy.ErrNotLoaded) {
					writeStatus(w, fromAPIError(apierrors.NewServiceUnavailable("deputy has not loaded its policy yet; see /readyz")))
					return nil, false
				}
				if serr != nil {
					attrs := authorizer.AttributesRecord{User: u, Verb: verb, Namespace: namespace, APIGroup: v1alpha1.Group,
						Resource: applicationsResource.Resource, Subresource: subresource, Name: name, ResourceRequest: true}
					writeStatus(w, fromAPIError(responsewriters.ForbiddenStatusError(attrs, serr.Error())))
					return nil, false
				}
			}
		}
	}
	switch {
	case errors.Is(err, policy.ErrNotLoaded):
		writeStatus(w, fromAPIError(apierrors.NewServiceUnavailable("deputy has not loaded its policy yet; see /readyz")))
		return nil, false
	case err != nil:
		writeStatus(w, fromAPIError(apierrors.NewInternalError(err)))
		return nil, false
	case app == nil:
		writeStatus(w, fromAPIError(apierrors.NewNotFound(applicationsResource, name)))
		return nil, false
	}
	return app, true
}

// sync starts a sync: POST .../applications/{name}/sync.
func (h *APIHandler) sync(w http.ResponseWriter, r *http.Request) {
	ns, name := chi.URLParam(r, "namespace"), chi.URLParam(r, "name")
	op, serr := readSyncOperation(w, r)
	if serr != nil {
		writeStatus(w, serr)
		return
	}
	app, ok := h.lookup(w, r, "create", "sync", ns, name)
	if !ok {
		return
	}
	project, ok := h.project(w, app, op)
	if !ok {
		return
	}
	u := apiUser(r.Context())
	state, err := h.opts.Applications.Start(r.Context(), app, project, op, v1alpha1.InitiatedBy{Username: u.GetName()})
	log := h.requestLog(r)
	switch {
	case errors.Is(err, apps.ErrOperationInProgress):
		log.Info("sync refused: an operation is in progress", "application", ns+"/"+name)
		writeStatus(w, fromAPIError(apierrors.NewConflict(applicationsResource, name, err)))
		return
	case errors.Is(err, apps.ErrInvalidSync):
		writeStatus(w, invalidApplication(name, err.Error()))
		return
	case errors.Is(err, apps.ErrShuttingDown):
		writeStatus(w, fromAPIError(apierrors.NewServiceUnavailable(err.Error())))
		return
	case apierrors.IsNotFound(err):
		writeStatus(w, fromAPIError(apierrors.NewNotFound(applicationsResource, name)))
		return
	case apierrors.IsConflict(err):
		writeStatus(w, fromAPIError(apierrors.NewConflict(applicationsResource, name, err)))
		return
	case err != nil:
		log.Error("sync could not start", "application", ns+"/"+name, "error", err.Error())
		writeStatus(w, fromAPIError(apierrors.NewInternalError(err)))
		return
	}
	log.Info("sync started", "application", ns+"/"+name, "revision", op.Revision, "prune", op.Prune, "dryRun", op.DryRun, "healthTimeout", op.HealthTimeout)
	writeJSON(w, http.StatusAccepted, state)
}

// project checks that op's revisions fit app's sources (422) and returns
// app's AppProject: an unusable project is 422, one that cannot be read yet
// 503 (answered here).
func (h *APIHandler) project(w http.ResponseWriter, app *v1alpha1.Application, op v1alpha1.SyncOperation) (*v1alpha1.AppProject, bool) {
	if msg := revisionsMismatch(app, op); msg != "" {
		writeStatus(w, invalidApplication(app.Name, msg))
		return nil, false
	}
	project, err := h.opts.Applications.AppProject(app)
	if errors.Is(err, policy.ErrProjectNotUsable) {
		writeStatus(w, invalidApplication(app.Name, strings.TrimPrefix(err.Error(), policy.ErrProjectNotUsable.Error()+": ")))
		return nil, false
	}
	if err != nil {
		writeStatus(w, fromAPIError(apierrors.NewServiceUnavailable(err.Error())))
		return nil, false
	}
	return project, true
}

// invalidApplication is a 422 about the Application name with message.
func invalidApplication(name, message string) *statusError {
	return fromAPIError(apierrors.NewInvalid(schema.GroupKind{Group: v1alpha1.Group, Kind: v1alpha1.KindApplication}, name, nil)).withMessage(message)
}

// readSyncOperation reads the optional JSON body of a sync request strictly:
// unknown, duplicate and wrong-case fields are 400, a body that is not JSON
// 415, a body over maxSyncRequestBytes 413.
func readSyncOperation(w http.ResponseWriter, r *http.Request) (v1alpha1.SyncOperation, *statusError) {
	var op v1alpha1.SyncOperation
	body, serr := readLimitedBody(w, r, maxSyncRequestBytes)
	if serr != nil {
		return op, serr
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return op, nil // no body: sync the source's targetRevision, no prune, no dry run
	}
	ct := r.Header.Get("Content-Type")
	// No content type is read as JSON: `kubectl create --raw -f` sends none.
	if mt, _, err := mime.ParseMediaType(ct); ct != "" && (err != nil || mt != "application/json") {
		return op, newStatusError(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("unsupported content type %q: send application/json, e.g. {\"revision\":\"\",\"prune\":false,\"dryRun\":false}", ct))
	}
	strictErrs, err := kjson.UnmarshalStrict(body, &op) // case-sensitive; unknown and duplicate fields are strict errors
	if err != nil {
		return op, badRequest("failed to decode the sync request: %v (send {\"revision\":\"\",\"prune\":false,\"dryRun\":false})", err)
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			msgs[i] = e.Error()
		}
		return op, badRequest("invalid sync request: %s (the fields are revision, revisions, prune, dryRun and healthTimeout)", strings.Join(msgs, "; "))
	}
	if errs := op.Validate(nil); len(errs) > 0 {
		return op, badRequest("invalid sync request: %s", errs.ToAggregate().Error())
	}
	return op, checkRevisions(op)
}

// checkRevisions refuses (400) a revision that is too long or holds blanks
// or control characters.
func checkRevisions(op v1alpha1.SyncOperation) *statusError {
	for _, rev := range append([]string{op.Revision}, op.Revisions...) {
		if len(rev) > maxRevisionLength {
			return badRequest("revision is longer than %d characters", maxRevisionLength)
		}
		if strings.IndexFunc(rev, func(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }) >= 0 {
			return badRequest("revision %q contains blanks or control characters: give a branch, tag or commit SHA", rev)
		}
	}
	return nil
}

// revisionsMismatch says why op's revisions do not fit app's sources, ""
// when they do: revision is for spec.source, revisions (one per source) for
// spec.sources.
func revisionsMismatch(app *v1alpha1.Application, op v1alpha1.SyncOperation) string {
	n := len(app.Spec.Sources)
	switch {
	case !app.Spec.HasMultipleSources() && len(op.Revisions) > 0:
		return "revisions is for an Application with spec.sources; this one has spec.source: send revision"
	case app.Spec.HasMultipleSources() && op.Revision != "":
		return fmt.Sprintf("revision names one revision, but the Application has %d sources (spec.sources): send revisions, one per source in order (\"\" keeps a source's targetRevision), or no revision", n)
	case app.Spec.HasMultipleSources() && len(op.Revisions) > 0 && len(op.Revisions) != n:
		return fmt.Sprintf("revisions has %d revisions, but the Application has %d sources (spec.sources): send one per source in order", len(op.Revisions), n)
	}
	return ""
}

// get answers GET .../applications/{name}, or streams with ?watch=true.
func (h *APIHandler) get(w http.ResponseWriter, r *http.Request) {
	ns, name := chi.URLParam(r, "namespace"), chi.URLParam(r, "name")
	watch := false
	if v := r.URL.Query().Get("watch"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeStatus(w, badRequest("watch=%q: use watch=true or watch=false", v))
			return
		}
		watch = b
	}
	app, ok := h.lookup(w, r, "get", "", ns, name)
	if !ok {
		return
	}
	if watch {
		h.stream(w, r, ns, name)
		return
	}
	out := app.DeepCopy()
	out.APIVersion, out.Kind = v1alpha1.SchemeGroupVersion.String(), v1alpha1.KindApplication
	out.Status = h.opts.Applications.ApplicationStatus(ns, name)
	if st := out.Status.OperationState; st != nil && st.Phase == v1alpha1.OperationRunning {
		out.Operation = st.Operation.DeepCopy()
	}
	writeJSON(w, http.StatusOK, out)
}

// untilStopped is ctx, also cancelled when CloseStreams is called (the
// server starts draining); call cancel when done.
func (h *APIHandler) untilStopped(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// stream writes the operation's events as NDJSON until it ends, the client
// goes away, or the server shuts down.
func (h *APIHandler) stream(w http.ResponseWriter, r *http.Request, ns, name string) {
	ctx, cancel := h.untilStopped(r.Context())
	defer cancel()
	events := h.opts.Applications.Watch(ctx, ns, name)

	hdr := w.Header()
	hdr.Set("Content-Type", APIStreamContentType)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	// No deadline while waiting for events (errors: the writer cannot set
	// deadlines, as in tests; then the server's own timeouts apply).
	_ = rc.SetWriteDeadline(time.Time{})
	enc := json.NewEncoder(w)
	for ev := range events {
		if ctx.Err() != nil {
			continue // drain: Watch closes the channel once ctx has ended
		}
		_ = rc.SetWriteDeadline(time.Now().Add(apiStreamWriteTimeout))
		if err := enc.Encode(ev); err != nil {
			h.requestLog(r).Debug("watch stream ended by the client", "application", ns+"/"+name, "error", err.Error())
			cancel()
			continue
		}
		if err := rc.Flush(); err != nil {
			cancel()
			continue
		}
		// Again none while waiting: a sync may run for minutes between events.
		_ = rc.SetWriteDeadline(time.Time{})
	}
}

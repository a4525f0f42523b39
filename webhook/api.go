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
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kjson "sigs.k8s.io/json"

	"deputy.dev/deputy/policy"
	"deputy.dev/deputy/policy/v1alpha1"
	"deputy.dev/deputy/syncer"
)

// APIPrefix is the path prefix of deputy's own API (group deputy.dev, version
// v1alpha1), laid out as kube-apiserver lays out a group's resources.
const APIPrefix = "/apis/" + v1alpha1.Group + "/" + v1alpha1.Version

// APIStreamContentType is the content type of a watch: newline-delimited JSON,
// one syncer.Event per line.
const APIStreamContentType = "application/x-ndjson"

// maxSyncRequestBytes bounds the body of a sync request: it holds three short
// fields (revision, prune, dryRun), so 64 KiB is generous and anything larger
// is refused with 413 before it is read further.
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

// ApplicationStore finds Applications and their AppProjects for deputy's API.
// File mode reads the policy snapshot (SnapshotApplications); cluster mode
// will read informers.
type ApplicationStore interface {
	// Application returns the Application namespace/name, or nil when there
	// is none.
	//
	// Errors: policy.ErrNotLoaded while nothing has been loaded yet.
	Application(namespace, name string) (*v1alpha1.Application, error)
	// AppProject returns the AppProject that governs app: the deputy.dev
	// AppProject named spec.project in the Application's namespace, or nil.
	AppProject(app *v1alpha1.Application) (*v1alpha1.AppProject, error)
}

// SnapshotApplications is the ApplicationStore of file mode: the Applications
// and AppProjects of the current policy snapshot.
func SnapshotApplications(current func() *policy.Snapshot) ApplicationStore {
	return snapshotApplications(current)
}

type snapshotApplications func() *policy.Snapshot

func (f snapshotApplications) Application(namespace, name string) (*v1alpha1.Application, error) {
	snap := f()
	if snap == nil {
		return nil, policy.ErrNotLoaded
	}
	a := snap.Application(namespace, name)
	if a == nil {
		return nil, nil
	}
	return a.Object, nil
}

func (f snapshotApplications) AppProject(app *v1alpha1.Application) (*v1alpha1.AppProject, error) {
	snap := f()
	if snap == nil {
		return nil, policy.ErrNotLoaded
	}
	return snap.DeputyAppProject(app.Namespace, app.Spec.Project), nil
}

// NewAPIAuthenticator is the authenticator of deputy's own API, composed from
// k8s.io/apiserver pieces as kube-apiserver composes its own: a client
// certificate signed by the client CA (user = common name, groups =
// organizations; clientCA nil disables it), then a bearer token through
// tokens (deputy's token authenticator chain, tokenreview.NewChain), in a
// union where the first success wins; every authenticated user also gets the
// group system:authenticated. There is no anonymous access.
func NewAPIAuthenticator(tokens authenticator.Token, clientCA x509request.VerifyOptionFunc) authenticator.Request {
	var chain []authenticator.Request
	if clientCA != nil {
		chain = append(chain, x509request.NewDynamic(clientCA, x509request.CommonNameUserConversion))
	}
	if tokens != nil {
		chain = append(chain, bearertoken.New(tokens))
	}
	return group.NewAuthenticatedGroupAdder(union.New(chain...))
}

// APIOptions configure the APIHandler. Every field is required except
// Metrics and Log.
type APIOptions struct {
	// Authenticator authenticates callers (NewAPIAuthenticator).
	Authenticator authenticator.Request
	// APIAudiences are put into the authentication context, as
	// kube-apiserver does with its --api-audiences: static tokens are valid
	// for these audiences only.
	APIAudiences []string
	// Authorizer decides each request: deputy's authorizer chain, the one
	// /authorize answers with.
	Authorizer authorizer.Authorizer
	// Applications finds Applications and their AppProjects.
	Applications ApplicationStore
	// Operations starts syncs and reports their state: the operations queue
	// in file mode (*syncer.Operations), the Applications' operation field
	// and status in cluster mode.
	Operations SyncService
	Log        *slog.Logger
}

// APIHandler serves deputy's own API:
//
//	POST {APIPrefix}/namespaces/{ns}/applications/{name}/sync   start a sync (202 + OperationState)
//	GET  {APIPrefix}/namespaces/{ns}/applications/{name}        the Application with its status
//	GET  {APIPrefix}/namespaces/{ns}/applications/{name}?watch=true   its operation's progress, NDJSON
//
// Every request is authenticated (401 otherwise) and then authorized with
// deputy's authorizer as verb create on applications/sync or verb get on
// applications, in group deputy.dev, the namespace and the name (403
// otherwise, with kube-apiserver's message and deputy's reason). Errors are
// metav1.Status objects, as kube-apiserver writes them. The Authorization
// header is removed once the caller is authenticated; tokens are never logged.
type APIHandler struct {
	opts     APIOptions
	log      *slog.Logger
	router   http.Handler
	stop     chan struct{}
	stopOnce sync.Once
}

// NewAPIHandler returns the handler; mount it at APIPrefix + "/*".
func NewAPIHandler(opts APIOptions) *APIHandler {
	h := &APIHandler{opts: opts, log: opts.Log, stop: make(chan struct{})}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	r := chi.NewRouter()
	r.Use(h.authenticate)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, apierrors.NewNotFound(schema.GroupResource{}, ""), "the server could not find the requested resource: deputy serves "+
			"POST "+APIPrefix+"/namespaces/NS/applications/NAME/sync and GET "+APIPrefix+"/namespaces/NS/applications/NAME")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, apierrors.NewMethodNotSupported(applicationsResource, r.Method), "")
	})
	r.Post(APIPrefix+"/namespaces/{namespace}/applications/{name}/sync", h.sync)
	r.Get(APIPrefix+"/namespaces/{namespace}/applications/{name}", h.get)
	h.router = r
	return h
}

// ServeHTTP implements http.Handler.
func (h *APIHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.router.ServeHTTP(w, r) }

// CloseStreams ends every watch stream (and refuses new ones), so that a
// graceful shutdown does not wait for syncs to finish. The server calls it
// when it starts draining.
func (h *APIHandler) CloseStreams() { h.stopOnce.Do(func() { close(h.stop) }) }

type apiUserKey struct{}

func apiUser(ctx context.Context) user.Info {
	u, _ := ctx.Value(apiUserKey{}).(user.Info)
	return u
}

// authenticate is kube-apiserver's filters.WithAuthentication for this API:
// the API audiences go into the context, the union authenticates, the
// Authorization header is dropped, and a caller nobody vouches for gets 401.
func (h *APIHandler) authenticate(next http.Handler) http.Handler {
	auds := authenticator.Audiences(h.opts.APIAudiences)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if len(auds) > 0 {
			r = r.WithContext(authenticator.WithAudiences(ctx, auds))
		}
		var (
			resp *authenticator.Response
			ok   bool
			err  error
		)
		if h.opts.Authenticator != nil {
			resp, ok, err = h.opts.Authenticator.AuthenticateRequest(r)
		}
		// Never let a credential travel further than authentication.
		r.Header.Del("Authorization")
		if ok && resp != nil && len(auds) > 0 && len(resp.Audiences) > 0 && len(auds.Intersect(resp.Audiences)) == 0 {
			ok, err = false, errors.New("the credential is not valid for deputy's API audiences")
		}
		if !ok || resp == nil || resp.User == nil {
			// err comes from authenticators that never include the token
			// ("invalid bearer token", certificate verification errors).
			h.log.Info("api request unauthenticated", "requestID", requestID(ctx), "remote", r.RemoteAddr,
				"method", r.Method, "path", r.URL.Path, "error", errString(err))
			if r.ProtoMajor == 2 {
				// As kube-apiserver (CVE-2023-44487): an unauthenticated
				// client does not get to keep an HTTP/2 connection open.
				w.Header().Set("Connection", "close")
			}
			writeAPIError(w, apierrors.NewUnauthorized("Unauthorized"), "Unauthorized: send a bearer token that deputy's token authenticators accept "+
				"(Authorization: Bearer ...) or a client certificate signed by deputy's client CA")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, apiUserKey{}, resp.User)))
	})
}

// authorize asks deputy's authorizer; only an Allow passes. It answers 403
// (or 503 before any policy is loaded) itself and returns false otherwise.
func (h *APIHandler) authorize(w http.ResponseWriter, r *http.Request, verb, subresource, namespace, name string) bool {
	ctx := r.Context()
	attrs := authorizer.AttributesRecord{
		User: apiUser(ctx), Verb: verb, Namespace: namespace,
		APIGroup: v1alpha1.Group, APIVersion: v1alpha1.Version, Resource: applicationsResource.Resource, Subresource: subresource,
		Name: name, ResourceRequest: true, Path: r.URL.Path,
	}
	decision, reason, err := h.opts.Authorizer.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return true
	}
	log := h.requestLog(r)
	if errors.Is(err, policy.ErrNotLoaded) {
		log.Info("api request refused: no policy loaded", "verb", verb, "application", namespace+"/"+name)
		writeAPIError(w, apierrors.NewServiceUnavailable("deputy has not loaded its policy yet; see /readyz"), "")
		return false
	}
	if reason == "" && err != nil {
		reason = err.Error()
	}
	log.Info("api request forbidden", "verb", verb, "resource", resourceWithSubresource(attrs), "application", namespace+"/"+name, "reason", reason)
	writeAPIError(w, forbidden(attrs, reason), "")
	return false
}

func resourceWithSubresource(a authorizer.Attributes) string {
	if sub := a.GetSubresource(); sub != "" {
		return a.GetResource() + "/" + sub
	}
	return a.GetResource()
}

// forbidden is kube-apiserver's responsewriters.ForbiddenStatusError for a
// namespaced resource request: `applications.deputy.dev "name" is forbidden:
// User "u" cannot create resource "applications/sync" in API group
// "deputy.dev" in the namespace "ns"`, then ": " and the authorizer's reason.
func forbidden(a authorizer.Attributes, reason string) *apierrors.StatusError {
	username := ""
	if u := a.GetUser(); u != nil {
		username = u.GetName()
	}
	msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q",
		username, a.GetVerb(), resourceWithSubresource(a), a.GetAPIGroup(), a.GetNamespace())
	if reason != "" {
		msg += ": " + reason
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: a.GetAPIGroup(), Resource: a.GetResource()}, a.GetName(), errors.New(msg))
}

func (h *APIHandler) requestLog(r *http.Request) *slog.Logger {
	name := ""
	if u := apiUser(r.Context()); u != nil {
		name = u.GetName()
	}
	return h.log.With("requestID", requestID(r.Context()), "user", name)
}

// lookup finds the Application and answers 404 or 503 itself when it cannot.
func (h *APIHandler) lookup(w http.ResponseWriter, namespace, name string) (*v1alpha1.Application, bool) {
	app, err := h.opts.Applications.Application(namespace, name)
	switch {
	case errors.Is(err, policy.ErrNotLoaded):
		writeAPIError(w, apierrors.NewServiceUnavailable("deputy has not loaded its policy yet; see /readyz"), "")
		return nil, false
	case err != nil:
		writeAPIError(w, apierrors.NewInternalError(err), "")
		return nil, false
	case app == nil:
		writeAPIError(w, apierrors.NewNotFound(applicationsResource, name), "")
		return nil, false
	}
	return app, true
}

// sync starts a sync: POST .../applications/{name}/sync.
func (h *APIHandler) sync(w http.ResponseWriter, r *http.Request) {
	ns, name := chi.URLParam(r, "namespace"), chi.URLParam(r, "name")
	if !h.authorize(w, r, "create", "sync", ns, name) {
		return
	}
	op, serr := readSyncOperation(w, r)
	if serr != nil {
		writeStatus(w, serr)
		return
	}
	app, ok := h.lookup(w, ns, name)
	if !ok {
		return
	}
	project, err := h.opts.Applications.AppProject(app)
	if err != nil {
		writeAPIError(w, apierrors.NewServiceUnavailable(err.Error()), "")
		return
	}
	if project == nil {
		writeAPIError(w, apierrors.NewInvalid(schema.GroupKind{Group: v1alpha1.Group, Kind: v1alpha1.KindApplication}, name, nil),
			fmt.Sprintf("Application %q references AppProject %q, which does not exist: create a deputy.dev AppProject named %q in namespace %q",
				ns+"/"+name, app.Spec.Project, app.Spec.Project, ns))
		return
	}
	u := apiUser(r.Context())
	state, err := h.opts.Operations.Start(r.Context(), app, project, op, v1alpha1.InitiatedBy{Username: u.GetName()})
	log := h.requestLog(r)
	switch {
	case errors.Is(err, syncer.ErrOperationInProgress):
		log.Info("sync refused: an operation is in progress", "application", ns+"/"+name)
		writeAPIError(w, apierrors.NewConflict(applicationsResource, name, err), "")
		return
	case errors.Is(err, syncer.ErrShuttingDown):
		writeAPIError(w, apierrors.NewServiceUnavailable(err.Error()), "")
		return
	case apierrors.IsNotFound(err):
		writeAPIError(w, apierrors.NewNotFound(applicationsResource, name), "")
		return
	case apierrors.IsConflict(err):
		writeAPIError(w, apierrors.NewConflict(applicationsResource, name, err), "")
		return
	case err != nil:
		log.Error("sync could not start", "application", ns+"/"+name, "error", err.Error())
		writeAPIError(w, apierrors.NewInternalError(err), "")
		return
	}
	log.Info("sync started", "application", ns+"/"+name, "revision", op.Revision, "prune", op.Prune, "dryRun", op.DryRun)
	writeJSON(w, http.StatusAccepted, state)
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
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return op, &statusError{code: http.StatusUnsupportedMediaType, reason: metav1.StatusReasonUnsupportedMediaType,
			message: fmt.Sprintf("unsupported content type %q: send application/json, e.g. {\"revision\":\"\",\"prune\":false,\"dryRun\":false}", ct)}
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
		return op, badRequest("invalid sync request: %s (the fields are revision, prune and dryRun)", strings.Join(msgs, "; "))
	}
	if len(op.Revision) > maxRevisionLength {
		return op, badRequest("revision is longer than %d characters", maxRevisionLength)
	}
	if strings.IndexFunc(op.Revision, func(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }) >= 0 {
		return op, badRequest("revision %q contains blanks or control characters: give a branch, tag or commit SHA", op.Revision)
	}
	return op, nil
}

// get answers GET .../applications/{name}, or streams with ?watch=true.
func (h *APIHandler) get(w http.ResponseWriter, r *http.Request) {
	ns, name := chi.URLParam(r, "namespace"), chi.URLParam(r, "name")
	if !h.authorize(w, r, "get", "", ns, name) {
		return
	}
	watch := false
	if v := r.URL.Query().Get("watch"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeStatus(w, badRequest("watch=%q: use watch=true or watch=false", v))
			return
		}
		watch = b
	}
	app, ok := h.lookup(w, ns, name)
	if !ok {
		return
	}
	if watch {
		h.stream(w, r, ns, name)
		return
	}
	out := app.DeepCopy()
	out.APIVersion, out.Kind = v1alpha1.SchemeGroupVersion.String(), v1alpha1.KindApplication
	out.Status = h.opts.Operations.ApplicationStatus(ns, name)
	if st := out.Status.OperationState; st != nil && st.Phase == v1alpha1.OperationRunning {
		out.Operation = st.Operation.DeepCopy()
	}
	writeJSON(w, http.StatusOK, out)
}

// stream writes the operation's events as NDJSON until it ends, the client
// goes away, or the server shuts down.
func (h *APIHandler) stream(w http.ResponseWriter, r *http.Request, ns, name string) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	events := h.opts.Operations.Watch(ctx, ns, name)

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

// writeAPIError writes a StatusError as kube-apiserver does; message, if not
// empty, replaces the default message.
func writeAPIError(w http.ResponseWriter, err *apierrors.StatusError, message string) {
	st := err.Status()
	st.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	if message != "" {
		st.Message = message
	}
	writeJSON(w, int(st.Code), &st)
}

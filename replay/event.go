package replay

import (
	jsoniter "github.com/json-iterator/go"
	"slices"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Annotation keys kube-apiserver's authorization filter writes on every
// audit event of a request it authorized
// (k8s.io/apiserver/pkg/endpoints/filters/authorization.go).
const (
	DecisionAnnotation = "authorization.k8s.io/decision"
	ReasonAnnotation   = "authorization.k8s.io/reason"
)

// Reasons an event is not replayed. They are stable: the JSON report
// carries them.
const (
	ReasonLineTooLong   = "line longer than 4 MiB"
	ReasonNotJSON       = "not a JSON audit event"
	ReasonNotEvent      = "not an audit.k8s.io/v1 Event"
	ReasonUnauth        = "unauthenticated"
	ReasonNoDecision    = "no authorization decision recorded"
	ReasonDeniedBefore  = "forbidden before authorization (e.g. a denied impersonation: the log does not record its target)"
	ReasonNoVerb        = "no verb or request URI"
	ReasonBadImpersonee = "impersonated user without a name"
)

// event is the part of an audit.k8s.io/v1 Event replay reads: a strict
// subset of auditv1.Event, field for field with the same JSON names and
// types where they are read. Decoding only these fields, and skipping
// requestObject, responseObject and the timestamps' parsing, is what makes
// decoding faster than into auditv1.Event (the test
// TestEventIsSubsetOfAuditEvent keeps the names in step).
type event struct {
	Kind                   string                          `json:"kind"`
	APIVersion             string                          `json:"apiVersion"`
	AuditID                types.UID                       `json:"auditID"`
	Stage                  auditv1.Stage                   `json:"stage"`
	RequestURI             string                          `json:"requestURI"`
	Verb                   string                          `json:"verb"`
	User                   authnv1.UserInfo                `json:"user"`
	ImpersonatedUser       *authnv1.UserInfo               `json:"impersonatedUser,omitempty"`
	AuthenticationMetadata *auditv1.AuthenticationMetadata `json:"authenticationMetadata,omitempty"`
	ObjectRef              *auditv1.ObjectReference        `json:"objectRef,omitempty"`
	ResponseStatus         *struct {
		Code int32 `json:"code,omitempty"`
	} `json:"responseStatus,omitempty"`
	// RequestReceivedTimestamp is kept as written (RFC 3339 with
	// microseconds): it is only shown.
	RequestReceivedTimestamp string            `json:"requestReceivedTimestamp"`
	Annotations              map[string]string `json:"annotations,omitempty"`
}

// Request is one rebuilt request: the authorization attributes
// kube-apiserver asked for it, and, when impersonated, who impersonated
// whom.
type Request struct {
	// Attributes are the request's own attributes, with the user the request
	// ran as (the impersonated user, if any).
	Attributes authorizer.AttributesRecord
	// Requestor is the authenticated user when the request was impersonated;
	// nil otherwise.
	Requestor user.Info
	// Wanted is the impersonation the requestor asked for, as rebuilt from
	// the event (see rebuildWanted); nil when not impersonated.
	Wanted *user.DefaultInfo
}

// decodeEvent decodes one line. ok is false with the reason when the line is
// not an audit event.
func decodeEvent(data []byte, ev *event) (reason string, ok bool) {
	*ev = event{}
	if err := jsonAPI.Unmarshal(data, ev); err != nil {
		return ReasonNotJSON, false
	}
	if ev.Kind != "Event" || ev.APIVersion != auditv1.SchemeGroupVersion.String() {
		return ReasonNotEvent, false
	}
	return "", true
}

// completeStage says whether an event is the one event of a request
// replay decides: stage ResponseComplete, or Panic.
func completeStage(ev *event) bool {
	return ev.Stage == auditv1.StageResponseComplete || ev.Stage == auditv1.StagePanic
}

// rebuild returns the request an event records, as kube-apiserver's
// RequestInfo and authentication built its authorization attributes; the
// reason when it cannot. The event is ResponseComplete or Panic.
func rebuild(ev *event) (*Request, string) {
	if ev.User.Username == "" || (ev.ResponseStatus != nil && ev.ResponseStatus.Code == 401) {
		return nil, ReasonUnauth
	}
	if ev.Verb == "" || ev.RequestURI == "" {
		return nil, ReasonNoVerb
	}
	r := &Request{}
	a := &r.Attributes
	a.Verb = ev.Verb
	if o := ev.ObjectRef; o != nil {
		a.ResourceRequest = true
		a.Namespace, a.Name = o.Namespace, o.Name
		a.APIGroup, a.APIVersion = o.APIGroup, o.APIVersion
		a.Resource, a.Subresource = o.Resource, o.Subresource
		if a.Verb == "create" && a.Subresource == "" {
			// kube-apiserver authorizes a create with the name its URL
			// has (none: POST to the collection); the audit event's
			// objectRef.name is filled in from the request body after
			// authorization (k8s.io/apiserver/pkg/audit LogRequestObject).
			a.Name = ""
		}
	} else {
		a.Path, _, _ = strings.Cut(ev.RequestURI, "?")
	}
	if ev.ImpersonatedUser == nil {
		a.User = userInfo(&ev.User)
		return r, ""
	}
	if ev.ImpersonatedUser.Username == "" {
		return nil, ReasonBadImpersonee
	}
	r.Requestor = userInfo(&ev.User)
	a.User = userInfo(ev.ImpersonatedUser)
	constraint := ""
	if ev.AuthenticationMetadata != nil {
		constraint = ev.AuthenticationMetadata.ImpersonationConstraint
	}
	r.Wanted = rebuildWanted(ev.ImpersonatedUser, constraint)
	return r, ""
}

// userInfo converts an audit event's user.
func userInfo(u *authnv1.UserInfo) *user.DefaultInfo {
	out := &user.DefaultInfo{Name: u.Username, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		out.Extra = make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			out.Extra[k] = v
		}
	}
	return out
}

// rebuildWanted returns the impersonation headers a request carried, from
// the impersonated user the audit event records (constraint: the
// authenticationMetadata.impersonationConstraint, "" for legacy). The event
// records the user kube-apiserver built (impersonation mode.go
// impersonationModeState.check), not the headers, so this undoes what
// kube-apiserver adds: system:authenticated (system:unauthenticated for
// anonymous) when the headers did not carry it; a ServiceAccount's
// groups (system:serviceaccounts, system:serviceaccounts:<ns>) when no group
// was asked for; a node's system:nodes in the node modes. A request whose
// headers named exactly these groups is rebuilt as one that named none: its
// group checks are not replayed (the log cannot tell them apart).
func rebuildWanted(u *authnv1.UserInfo, constraint string) *user.DefaultInfo {
	w := userInfo(u)
	groups := slices.Clone(u.Groups)
	added := user.AllAuthenticated
	if u.Username == user.Anonymous {
		added = user.AllUnauthenticated
	}
	if i := slices.Index(groups, added); i >= 0 && i == len(groups)-1 {
		groups = groups[:i]
	}
	if ns, _, err := serviceaccount.SplitUsername(u.Username); err == nil && slices.Equal(groups, serviceaccount.MakeGroupNames(ns)) {
		groups = nil
	}
	if (constraint == "impersonate:arbitrary-node" || constraint == "impersonate:associated-node") && slices.Equal(groups, []string{user.NodesGroup}) {
		groups = nil
	}
	w.Groups = groups
	return w
}

// jsonAPI decodes events: json-iterator (already in the module graph through
// structured-merge-diff, and what k8s.io/apimachinery decoded with for
// years) in its configuration compatible with encoding/json, which decodes
// these events three times as fast as encoding/json
// (BenchmarkDecodeEvent: ~8.5 µs against ~26.5 µs for a 1.1 KB event) —
// decoding was most of replay's time.
var jsonAPI = jsoniter.ConfigCompatibleWithStandardLibrary

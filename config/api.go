package config

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// API configures how deputy's own API (sync trigger and Application status)
// authenticates and authorizes callers, in kube-apiserver's order: client
// certificate, front-proxy request headers, bearer token, anonymous; then
// deputy's policy and, optionally, the cluster.
type API struct {
	// Anonymous lets requests without credentials through authentication as
	// system:anonymous (group system:unauthenticated), to be authorized like
	// any user. Default false: they get 401.
	Anonymous bool `json:"anonymous,omitempty"`
	// RequestHeader, when set, trusts the identity headers of a front proxy
	// (kube-apiserver's aggregation layer) on connections that present a
	// client certificate signed by ClientCAFile with one of AllowedNames:
	// kube-apiserver's --requestheader-* flags, same names and defaults.
	RequestHeader *RequestHeader `json:"requestHeader,omitempty"`
	// DelegatedAuthorization asks the cluster (a SubjectAccessReview with
	// deputy's identity) about requests deputy's own policy does not allow.
	// Needs cluster mode.
	DelegatedAuthorization bool `json:"delegatedAuthorization,omitempty"`
	// AggregatedGroup is the API group deputy's API answers as when served
	// through kube-apiserver's aggregation layer (APIService
	// v1alpha1.<group>). It cannot be deputy.dev: the CRDs serve
	// deputy.dev/v1alpha1 and an APIService would take that group-version
	// over. Default sync.deputy.dev.
	AggregatedGroup string `json:"aggregatedGroup,omitempty"`
}

// RequestHeader are kube-apiserver's --requestheader-* settings.
type RequestHeader struct {
	// ClientCAFile verifies the front proxy's client certificate
	// (--requestheader-client-ca-file). Required.
	ClientCAFile string `json:"clientCAFile"`
	// AllowedNames are the common names the proxy's certificate may have;
	// empty accepts any certificate ClientCAFile signed
	// (--requestheader-allowed-names).
	AllowedNames []string `json:"allowedNames,omitempty"`
	// UsernameHeaders default [X-Remote-User].
	UsernameHeaders []string `json:"usernameHeaders,omitempty"`
	// UIDHeaders default [X-Remote-Uid].
	UIDHeaders []string `json:"uidHeaders,omitempty"`
	// GroupHeaders default [X-Remote-Group].
	GroupHeaders []string `json:"groupHeaders,omitempty"`
	// ExtraHeaderPrefixes default [X-Remote-Extra-].
	ExtraHeaderPrefixes []string `json:"extraHeaderPrefixes,omitempty"`
}

// DefaultAggregatedGroup is the API group of deputy's API behind the
// aggregation layer.
const DefaultAggregatedGroup = "sync.deputy.dev"

// SetAPIDefaults fills the header names of requestHeader (kube-apiserver's
// defaults as kubeadm sets them) and the aggregated group.
func SetAPIDefaults(a *API) {
	if a.AggregatedGroup == "" {
		a.AggregatedGroup = DefaultAggregatedGroup
	}
	if rh := a.RequestHeader; rh != nil {
		if len(rh.UsernameHeaders) == 0 {
			rh.UsernameHeaders = []string{"X-Remote-User"}
		}
		if len(rh.UIDHeaders) == 0 {
			rh.UIDHeaders = []string{"X-Remote-Uid"}
		}
		if len(rh.GroupHeaders) == 0 {
			rh.GroupHeaders = []string{"X-Remote-Group"}
		}
		if len(rh.ExtraHeaderPrefixes) == 0 {
			rh.ExtraHeaderPrefixes = []string{"X-Remote-Extra-"}
		}
	}
}

func validateAPI(a *API, cluster Cluster, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if rh := a.RequestHeader; rh != nil && strings.TrimSpace(rh.ClientCAFile) == "" {
		errs = append(errs, field.Required(fld.Child("requestHeader", "clientCAFile"),
			"the CA that signs the front proxy's client certificate (kube-apiserver's --requestheader-client-ca-file)"))
	}
	if a.DelegatedAuthorization && cluster.Kubeconfig == "" && !cluster.InCluster {
		errs = append(errs, field.Invalid(fld.Child("delegatedAuthorization"), true,
			"needs cluster mode: set cluster.kubeconfig (--kubeconfig) or cluster.inCluster (--in-cluster)"))
	}
	switch {
	case a.AggregatedGroup == "deputy.dev":
		errs = append(errs, field.Invalid(fld.Child("aggregatedGroup"), a.AggregatedGroup,
			"deputy.dev/v1alpha1 is served by deputy's CRDs; an APIService for it would hide them: use another group, e.g. sync.deputy.dev"))
	case !strings.Contains(a.AggregatedGroup, "."):
		errs = append(errs, field.Invalid(fld.Child("aggregatedGroup"), a.AggregatedGroup, "must be a DNS subdomain with a dot, e.g. sync.deputy.dev"))
	}
	return errs
}

// Package v1alpha1 holds deputy's API types: AppProject (field-compatible with
// Argo CD's argoproj.io/v1alpha1 AppProject for the fields deputy reads) and
// Application. The same Go type serves both AppProject groups; the object's
// apiVersion says which group it came from.
//
// Upstream source of the field shapes: argoproj/argo-cd
// pkg/apis/application/v1alpha1/app_project_types.go and types.go.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is deputy's own API group.
const Group = "deputy.dev"

// ArgoCDGroup is Argo CD's API group; deputy reads its AppProjects too.
const ArgoCDGroup = "argoproj.io"

// Version is the only served version of both groups.
const Version = "v1alpha1"

// KindAppProject and KindApplication are the kinds deputy understands.
const (
	KindAppProject  = "AppProject"
	KindApplication = "Application"
)

// SchemeGroupVersion is deputy.dev/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// ArgoCDGroupVersion is argoproj.io/v1alpha1.
var ArgoCDGroupVersion = schema.GroupVersion{Group: ArgoCDGroup, Version: Version}

// AppProject groups Applications and says where they may deploy, what they may
// deploy, and as which ServiceAccount (destinationServiceAccounts).
type AppProject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              AppProjectSpec `json:"spec"`
}

// AppProjectSpec is the subset of Argo CD's AppProjectSpec that deputy evaluates.
// Fields keep Argo CD's JSON names so an Argo CD AppProject decodes unchanged.
type AppProjectSpec struct {
	// Description is free text.
	Description string `json:"description,omitempty"`
	// SourceRepos are repository URL globs Applications may use ("*" = any).
	SourceRepos []string `json:"sourceRepos,omitempty"`
	// Destinations are the (server or name, namespace) globs Applications may
	// deploy to; a leading "!" negates an entry.
	Destinations []ApplicationDestination `json:"destinations,omitempty"`
	// DestinationServiceAccounts maps destinations to the ServiceAccount a sync
	// impersonates; the first matching entry wins.
	DestinationServiceAccounts []ApplicationDestinationServiceAccount `json:"destinationServiceAccounts,omitempty"`
	// ClusterResourceWhitelist lists cluster-scoped kinds (and, with a name,
	// objects) that may be deployed; empty means none.
	ClusterResourceWhitelist []ClusterResourceRestrictionItem `json:"clusterResourceWhitelist,omitempty"`
	// ClusterResourceBlacklist lists cluster-scoped kinds (and, with a name,
	// objects) that may not be deployed.
	ClusterResourceBlacklist []ClusterResourceRestrictionItem `json:"clusterResourceBlacklist,omitempty"`
	// NamespaceResourceWhitelist lists namespaced kinds that may be deployed;
	// nil means all.
	NamespaceResourceWhitelist []metav1.GroupKind `json:"namespaceResourceWhitelist,omitempty"`
	// NamespaceResourceBlacklist lists namespaced kinds that may not be deployed.
	NamespaceResourceBlacklist []metav1.GroupKind `json:"namespaceResourceBlacklist,omitempty"`
	// Roles are project roles (name, description, groups); deputy project tokens
	// are issued for them.
	Roles []ProjectRole `json:"roles,omitempty"`
	// SourceNamespaces are the namespaces Applications of this project may live in.
	SourceNamespaces []string `json:"sourceNamespaces,omitempty"`
}

// ClusterResourceRestrictionItem is one entry of a cluster-scoped white- or
// blacklist (Argo CD 3.x's type of the same name): Group and Kind are
// filepath.Match patterns; Name, when set, is a filepath.Match pattern on the
// object's name, and an entry without it covers every object of the kind.
type ClusterResourceRestrictionItem struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	Name  string `json:"name,omitempty"`
}

// ApplicationDestination is a target cluster (by server URL or registered name)
// and namespace. In an AppProject both are globs and a leading "!" negates.
type ApplicationDestination struct {
	Server    string `json:"server,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

// ApplicationDestinationServiceAccount maps a destination (server and namespace
// globs) to the ServiceAccount that syncs into it. DefaultServiceAccount is
// either "name" (in the Application's destination namespace) or "namespace:name".
type ApplicationDestinationServiceAccount struct {
	Server                string `json:"server"`
	Namespace             string `json:"namespace,omitempty"`
	DefaultServiceAccount string `json:"defaultServiceAccount"`
}

// ProjectRole is a named role inside a project.
type ProjectRole struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Policies    []string `json:"policies,omitempty"`
	Groups      []string `json:"groups,omitempty"`
}

package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"

	"deputy.dev/deputy/policy/v1alpha1"
)

// argoAppProject is Argo CD v3.5's AppProject as it is stored (argo-cd
// pkg/apis/application/v1alpha1 types.go AppProjectSpec, ProjectRole,
// ClusterResourceRestrictionItem): every field, so that decoding it strictly
// tells a field deputy does not know from one it knows and chose not to read.
// Fields that do not narrow what a sync may touch, or that Argo CD enforces
// itself before it impersonates (sync windows, signature keys, source
// integrity, orphaned-resource monitoring, JWT token records), are kept raw.
type argoAppProject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              argoAppProjectSpec `json:"spec"`
	Status            json.RawMessage    `json:"status,omitempty"`
}

type argoAppProjectSpec struct {
	SourceRepos                     []string                                        `json:"sourceRepos,omitempty"`
	Destinations                    []v1alpha1.ApplicationDestination               `json:"destinations,omitempty"`
	Description                     string                                          `json:"description,omitempty"`
	Roles                           []argoProjectRole                               `json:"roles,omitempty"`
	ClusterResourceWhitelist        []v1alpha1.ClusterResourceRestrictionItem       `json:"clusterResourceWhitelist,omitempty"`
	NamespaceResourceBlacklist      []metav1.GroupKind                              `json:"namespaceResourceBlacklist,omitempty"`
	OrphanedResources               json.RawMessage                                 `json:"orphanedResources,omitempty"`
	SyncWindows                     json.RawMessage                                 `json:"syncWindows,omitempty"`
	NamespaceResourceWhitelist      []metav1.GroupKind                              `json:"namespaceResourceWhitelist,omitempty"`
	SignatureKeys                   json.RawMessage                                 `json:"signatureKeys,omitempty"`
	ClusterResourceBlacklist        []v1alpha1.ClusterResourceRestrictionItem       `json:"clusterResourceBlacklist,omitempty"`
	SourceNamespaces                []string                                        `json:"sourceNamespaces,omitempty"`
	PermitOnlyProjectScopedClusters bool                                            `json:"permitOnlyProjectScopedClusters,omitempty"`
	DestinationServiceAccounts      []v1alpha1.ApplicationDestinationServiceAccount `json:"destinationServiceAccounts,omitempty"`
	SourceIntegrity                 json.RawMessage                                 `json:"sourceIntegrity,omitempty"`
}

type argoProjectRole struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Policies    []string        `json:"policies,omitempty"`
	JWTTokens   json.RawMessage `json:"jwtTokens,omitempty"`
	Groups      []string        `json:"groups,omitempty"`
}

// ErrProjectRefused is matched (errors.Is) by the errors of DecodeAppProject
// for an AppProject that decodes but that deputy refuses to evaluate: it
// names a field deputy does not know, or one whose restriction deputy cannot
// honour. Such a project grants nothing.
var ErrProjectRefused = errors.New("AppProject refused")

// DecodeAppProject decodes an AppProject of group deputy.dev or argoproj.io
// from JSON, case-sensitively, as kube-apiserver does:
//   - deputy.dev strictly against deputy's type: an unknown or repeated field
//     is an error naming its path;
//   - argoproj.io strictly against Argo CD v3.5's AppProject (argoAppProject):
//     a field Argo CD's schema does not have is refused, since it could narrow
//     what a sync may touch and deputy would drop it; so is
//     permitOnlyProjectScopedClusters: true (deputy cannot see which clusters
//     Argo CD scopes to the project). Fields Argo CD enforces itself (sync
//     windows, signature keys, source integrity) are accepted and not read.
//
// It does not validate (ValidateAppProject does).
//
// Errors: JSON that does not decode; an unknown or repeated field, or a
// refused field (errors.Is ErrProjectRefused), each naming the field and the
// fix.
func DecodeAppProject(group string, data []byte) (*v1alpha1.AppProject, error) {
	if group == v1alpha1.Group {
		var p v1alpha1.AppProject
		if err := strictUnmarshal(data, &p); err != nil {
			return nil, err
		}
		return &p, nil
	}
	var a argoAppProject
	if err := strictUnmarshal(data, &a); err != nil {
		var unknown *unknownFieldsError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("%w: %s: the field is not in Argo CD v3.5's AppProject, and deputy cannot tell whether it narrows what a sync may touch, so deputy refuses the project (it grants nothing; in a policy file it fails the load): remove the field",
				ErrProjectRefused, strings.Join(unknown.msgs, "; "))
		}
		return nil, err
	}
	if a.Spec.PermitOnlyProjectScopedClusters {
		return nil, fmt.Errorf("%w: spec.permitOnlyProjectScopedClusters is true: deputy cannot tell which clusters Argo CD scopes to this project, so deputy refuses the project (it grants nothing; in a policy file it fails the load); set it to false and list the destinations instead", ErrProjectRefused)
	}
	p := &v1alpha1.AppProject{TypeMeta: a.TypeMeta, ObjectMeta: a.ObjectMeta, Spec: v1alpha1.AppProjectSpec{
		Description:                a.Spec.Description,
		SourceRepos:                a.Spec.SourceRepos,
		Destinations:               a.Spec.Destinations,
		DestinationServiceAccounts: a.Spec.DestinationServiceAccounts,
		ClusterResourceWhitelist:   a.Spec.ClusterResourceWhitelist,
		ClusterResourceBlacklist:   a.Spec.ClusterResourceBlacklist,
		NamespaceResourceWhitelist: a.Spec.NamespaceResourceWhitelist,
		NamespaceResourceBlacklist: a.Spec.NamespaceResourceBlacklist,
		SourceNamespaces:           a.Spec.SourceNamespaces,
	}}
	for _, r := range a.Spec.Roles {
		p.Spec.Roles = append(p.Spec.Roles, v1alpha1.ProjectRole{Name: r.Name, Description: r.Description, Policies: r.Policies, Groups: r.Groups})
	}
	return p, nil
}

// unknownFieldsError is strictUnmarshal's error for unknown or repeated
// fields.
type unknownFieldsError struct{ msgs []string }

func (e *unknownFieldsError) Error() string {
	return strings.Join(e.msgs, "; ") + " (fix or remove the field)"
}

// strictUnmarshal decodes case-sensitively and rejects unknown and repeated
// fields, the way kube-apiserver's strict field validation does; the error
// (an *unknownFieldsError) lists every such field, sorted.
func strictUnmarshal(data []byte, into any) error {
	strictErrs, err := kjson.UnmarshalStrict(data, into, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strictErrs) == 0 {
		return nil
	}
	msgs := make([]string, len(strictErrs))
	for i, e := range strictErrs {
		msgs[i] = e.Error()
	}
	sort.Strings(msgs)
	return &unknownFieldsError{msgs: msgs}
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Hand-written deep copies, in the shape deepcopy-gen produces, for the types
// in types.go. Every type here holds only strings, slices of value structs and
// metav1 types, so a copy is the struct plus a fresh copy of each slice.

var _ runtime.Object = (*AppProject)(nil)

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *AppProject) DeepCopyInto(out *AppProject) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
}

// DeepCopy returns a deep copy of the AppProject, or nil for a nil receiver.
func (in *AppProject) DeepCopy() *AppProject {
	if in == nil {
		return nil
	}
	out := new(AppProject)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *AppProject) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *AppProjectSpec) DeepCopyInto(out *AppProjectSpec) {
	*out = *in
	out.SourceRepos = appProjectCopyStrings(in.SourceRepos)
	if in.Destinations != nil {
		out.Destinations = make([]ApplicationDestination, len(in.Destinations))
		copy(out.Destinations, in.Destinations)
	}
	if in.DestinationServiceAccounts != nil {
		out.DestinationServiceAccounts = make([]ApplicationDestinationServiceAccount, len(in.DestinationServiceAccounts))
		copy(out.DestinationServiceAccounts, in.DestinationServiceAccounts)
	}
	out.ClusterResourceWhitelist = appProjectCopyRestrictions(in.ClusterResourceWhitelist)
	out.ClusterResourceBlacklist = appProjectCopyRestrictions(in.ClusterResourceBlacklist)
	out.NamespaceResourceWhitelist = appProjectCopyGroupKinds(in.NamespaceResourceWhitelist)
	out.NamespaceResourceBlacklist = appProjectCopyGroupKinds(in.NamespaceResourceBlacklist)
	if in.Roles != nil {
		out.Roles = make([]ProjectRole, len(in.Roles))
		for i := range in.Roles {
			in.Roles[i].DeepCopyInto(&out.Roles[i])
		}
	}
	out.SourceNamespaces = appProjectCopyStrings(in.SourceNamespaces)
}

// DeepCopy returns a deep copy of the AppProjectSpec, or nil for a nil receiver.
func (in *AppProjectSpec) DeepCopy() *AppProjectSpec {
	if in == nil {
		return nil
	}
	out := new(AppProjectSpec)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *ApplicationDestination) DeepCopyInto(out *ApplicationDestination) {
	*out = *in
}

// DeepCopy returns a copy of the ApplicationDestination, or nil for a nil receiver.
func (in *ApplicationDestination) DeepCopy() *ApplicationDestination {
	if in == nil {
		return nil
	}
	out := new(ApplicationDestination)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *ApplicationDestinationServiceAccount) DeepCopyInto(out *ApplicationDestinationServiceAccount) {
	*out = *in
}

// DeepCopy returns a copy of the ApplicationDestinationServiceAccount, or nil
// for a nil receiver.
func (in *ApplicationDestinationServiceAccount) DeepCopy() *ApplicationDestinationServiceAccount {
	if in == nil {
		return nil
	}
	out := new(ApplicationDestinationServiceAccount)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out; in must be non-nil.
func (in *ProjectRole) DeepCopyInto(out *ProjectRole) {
	*out = *in
	out.Policies = appProjectCopyStrings(in.Policies)
	out.Groups = appProjectCopyStrings(in.Groups)
}

// DeepCopy returns a deep copy of the ProjectRole, or nil for a nil receiver.
func (in *ProjectRole) DeepCopy() *ProjectRole {
	if in == nil {
		return nil
	}
	out := new(ProjectRole)
	in.DeepCopyInto(out)
	return out
}

// appProjectCopyStrings keeps nil as nil and an empty slice as empty, as
// deepcopy-gen does: some fields (NamespaceResourceWhitelist) give nil and
// empty different meanings.
func appProjectCopyStrings(in []string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	copy(out, in)
	return out
}

func appProjectCopyGroupKinds(in []metav1.GroupKind) []metav1.GroupKind {
	if in == nil {
		return nil
	}
	out := make([]metav1.GroupKind, len(in))
	copy(out, in)
	return out
}

func appProjectCopyRestrictions(in []ClusterResourceRestrictionItem) []ClusterResourceRestrictionItem {
	if in == nil {
		return nil
	}
	out := make([]ClusterResourceRestrictionItem, len(in))
	copy(out, in)
	return out
}
